package ownsim

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes results as a table, one scenario a row, with a
// legend.
func WriteTable(w io.Writer, rs []Result) error {
	if len(rs) == 0 {
		return nil
	}
	r0 := rs[0]
	clock := "simulated time, in-memory store"
	if r0.Real {
		clock = "real time, the store given"
	}
	fmt.Fprintf(w, "%d instances x %d partitions, interval %v, %s\n", r0.Members, r0.Partitions, r0.Interval, clock)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\toverlaps\toverlap_s\tfair\ts_to_fair\trounds_to_fair\tmoved\tmin_moves\texcess_moves\tsteals\tself_fences\tclaims_lost\tops/s\tops/s/instance\trows/s\trows/s/instance\treal_s\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%v\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.2f\t%.0f\t%.0f\t%.1f\t\n",
			r.Scenario, r.Overlaps, r.OverlapSeconds, r.Fair, r.SecondsToFair, r.RoundsToFair, r.Moved, r.MinMoves, r.ExcessMoves,
			r.Steals, r.SelfFences, r.ClaimsLost, r.OpsPerSecond(), r.PerMember(r.OpsPerSecond()), r.RowsPerSecond(),
			r.PerMember(r.RowsPerSecond()), r.Elapsed.Seconds())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprint(w, `overlaps: starts of a partition on an instance while another ran it (overlap_s: seconds partitions ran twice)
fair: the shares became fair and stayed so within the run's limit
s_to_fair: from the disturbance until every partition runs and live instances' counts differ by at most one, for good
rounds_to_fair: s_to_fair / interval; moved: starts on an instance other than the partition's last one
min_moves: the fewest any fair layout needs from the layout before; excess_moves: moved - min_moves
claims_lost: partitions asked in claims and not won; ops/s, rows/s (records read): the store's, from the disturbance to the end
real_s: the run's duration in real time
`)
	return err
}
