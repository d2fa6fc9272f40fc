package delivery

import (
	"fmt"
	"strings"
	"testing"
)

// A parked record's progress header that is malformed in the ways JSON
// decoders have been known to trip on (a dangling escape in a key, a
// document cut short, deep nesting, bytes that are not UTF-8), one after
// the other as a replay partition would bring them, must be ignored:
// resumeProgress neither panics (which would dead-letter the replay, its
// steps done never compensated) nor restores anything.
func TestResumeProgressIgnoresHostileHeaders(t *testing.T) {
	deep := `{"done":["check_account"],"x":` + strings.Repeat("[", 240) + strings.Repeat("]", 240) + `}`
	hostile := []string{
		`{"\`, `{"done\`, `{"done":["check_account"],"\`, `{"d\u`, `{"done":["check_acc\`, `{"done":["\u00`,
		`{"done":["check_account"]}}}`, `{"done":["check_account"],"tier":1}`, `{"done":"check_account"}`,
		`{"done":null}`, `{"done":[null]}`, `{"done":[]}`, "{\"done\":[\"check_account\x00\"]}",
		"{\"done\":[\"\xff\xfe\"]}", `[{"done":["check_account"]}]`, `"done"`, `null`, `{`, `}`, ` `,
		deep[:len(deep)-1], strings.Repeat("[", 500),
		`{"done":["check_account","create_package","check_third_party","schedule_drone","create_delivery","check_account"]}`,
		`{"done":["check_account","create_package","check_third_party","schedule_drone"],"drone_id":""}`,
	}
	for round := range 3 {
		for i, h := range hostile {
			t.Run(fmt.Sprintf("round %d header %d", round, i), func(t *testing.T) {
				p := &Progress{Done: make([]Step, 0, len(Steps))}
				var ok bool
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("header %q: resumeProgress panicked: %v", h, r)
						}
					}()
					ok = resumeProgress(p, []byte(h))
				}()
				if ok || len(p.Done) != 0 || p.Tier != "" || p.DroneID != "" || p.ThirdParty {
					t.Errorf("header %q restored %v: %+v; want it ignored", h, ok, p)
				}
			})
		}
	}
	// A good one still works after them (no decoder state left behind).
	p := &Progress{Done: make([]Step, 0, len(Steps))}
	if !resumeProgress(p, []byte(`{"done":["check_account","create_package"],"tier":"paying"}`)) ||
		len(p.Done) != 2 || p.Tier != Paying {
		t.Errorf("a good header after the hostile ones restored %+v", p)
	}
}
