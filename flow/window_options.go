package flow

import (
	"time"
)

// WindowOption configures Tumbling.
type WindowOption func(*windowConfig)

type windowConfig struct {
	lateness, maxAhead, idle   time.Duration
	lateSet, aheadSet, idleSet bool
	onLate                     func(*LateError)
	idleWhen                   func(topic string, partition int32) bool
	idleWhenHeld               func(topic string, partition int32, held int) bool
}

// Lateness is how long after its event time a message may arrive, and so
// how long after a window's end, in stream time, the window stays open
// (default the window size).
func Lateness(d time.Duration) WindowOption {
	return func(c *windowConfig) { c.lateness, c.lateSet = d, true }
}

// MaxAhead is how far after its arrival a message's event time may be
// (default the window size).
func MaxAhead(d time.Duration) WindowOption {
	return func(c *windowConfig) { c.maxAhead, c.aheadSet = d, true }
}

// IdleClose is how long a partition may receive nothing, in processing
// time, before its open windows are emitted anyway (default size +
// lateness).
func IdleClose(d time.Duration) WindowOption {
	return func(c *windowConfig) { c.idle, c.idleSet = d, true }
}

// IdleWhen, if set, lets IdleClose emit a partition's windows only when
// it returns true for the partition: give it whether the source has read
// the partition to its end and hears from its broker. Without it a reader
// that stalls longer than IdleClose (a broker outage, a paused process)
// while the partition's producers go on emits the open windows early, and
// their readings that come after are failed as late.
func IdleWhen(fn func(topic string, partition int32) bool) WindowOption {
	return func(c *windowConfig) { c.idleWhen = fn }
}

// IdleWhenHeld is IdleWhen told, too, how many messages of the partition
// the window holds in its open windows. A source's unsent count cannot
// see messages already sent and still on their way to the window (in the
// pipes before it, behind other partitions' backlog, or waiting while
// the window itself waited to hand on its output): their partition
// looks quiet to the window and read to its end to the source. Comparing
// held with the partition's unsettled messages at the source
// (source/kafka's PartitionStats.Unsettled) tells: they are equal only
// when nothing of the partition is on its way (nor being written or
// dead-lettered). With both options set, both must return true.
func IdleWhenHeld(fn func(topic string, partition int32, held int) bool) WindowOption {
	return func(c *windowConfig) { c.idleWhenHeld = fn }
}

// OnLate, if set, is called with every late or early message's error
// before the message is failed (counters, tests).
func OnLate(fn func(*LateError)) WindowOption { return func(c *windowConfig) { c.onLate = fn } }
