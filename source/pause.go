package source

import (
	"sync/atomic"
	"time"
)

// Pausable is a source that can stop reading from its broker and start
// again without losing or skipping anything: what it did not fetch meanwhile
// it fetches after. Priority pauses a level whose source is Pausable while
// a higher level has work waiting (see Priority). *kafka.Source is one.
//
// Both methods must be safe to call from any goroutine while the source
// runs, and calling either twice in a row must do no more than once. A
// paused source may still deliver what it had already fetched.
type Pausable interface {
	PauseReading()
	ResumeReading()
}

// Lagger is a source that knows how many messages wait for it at the
// broker, not yet fetched (Kafka: high watermark minus position). Priority
// counts a level with lag as having work waiting, as it does a level whose
// pipe holds messages. *kafka.Source is one.
type Lagger interface {
	Lag() int64
}

// TopicLister is a source that names the topics (or streams) it reads.
// Priority refuses two levels that read the same one: a message would be
// of two levels at once, and pausing one level would pause the other.
// *kafka.Source is one.
type TopicLister interface {
	Topics() []string
}

// pauseEvery is how often a priority source looks at its levels to pause
// or resume them: off the path of the messages, and often enough that a
// level is paused or resumed within a fetch or two.
const pauseEvery = 20 * time.Millisecond

// holdBack applies the pause rule of Priority: level l is held back
// (paused) while some level above it presses and l holds work of its own
// (its pipe at least half full). want gets the answer for every level.
func holdBack(pressing, holding, want []bool) {
	above := false
	for l := range pressing {
		want[l] = above && holding[l]
		above = above || pressing[l]
	}
}

// levelPauser pauses and resumes the Pausable levels of a priority source
// by the rule of holdBack, every pauseEvery, reading the levels' pipe
// lengths and lags.
type levelPauser struct {
	queued []func() int   // batches waiting in each level's pipe
	half   []int          // a level holds work at this many batches queued
	ended  []atomic.Bool  // the level's input has ended (set by the stage)
	lag    []Lagger       // nil: the level's source does not tell
	src    []Pausable     // nil: the level cannot be paused
	paused []bool         // what we last told src
	shown  []levelCounter // the levels' paused flags and pause counts, for metrics
	scr    [3][]bool      // pressing, holding, want
	quit   chan struct{}  // closed to stop
	done   chan struct{}  // closed when stopped, everything resumed
}

// newLevelPauser returns nil if no level below the first can be paused.
// A level's pipe holds capacity[l] batches.
func newLevelPauser(srcs []any, queued []func() int, capacity []int, ended []atomic.Bool, shown []levelCounter) *levelPauser {
	n := len(srcs)
	p := &levelPauser{queued: queued, ended: ended, shown: shown, half: make([]int, n), lag: make([]Lagger, n), src: make([]Pausable, n), paused: make([]bool, n)}
	for l, c := range capacity {
		p.half[l] = max(1, (c+1)/2)
	}
	some := false
	for l, s := range srcs {
		p.lag[l], _ = s.(Lagger)
		if ps, ok := s.(Pausable); ok && l > 0 {
			p.src[l], some = ps, true
		}
	}
	if !some {
		return nil
	}
	for i := range p.scr {
		p.scr[i] = make([]bool, n)
	}
	return p
}

// start runs the pauser until the returned function is called, which
// returns once every paused level is resumed.
func (p *levelPauser) start() (stop func()) {
	p.quit, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		defer p.resumeAll()
		t := time.NewTicker(pauseEvery)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.step()
			}
		}
	}()
	return func() {
		close(p.quit)
		<-p.done
	}
}

// step looks at the levels once and pauses or resumes those that changed.
func (p *levelPauser) step() {
	pressing, holding, want := p.scr[0], p.scr[1], p.scr[2]
	for l := range p.src {
		if p.ended[l].Load() {
			pressing[l], holding[l] = false, false
			continue
		}
		q := p.queued[l]()
		holding[l] = q >= p.half[l]
		pressing[l] = q > 0 || (p.lag[l] != nil && p.lag[l].Lag() > 0)
	}
	holdBack(pressing, holding, want)
	for l, s := range p.src {
		if s == nil || want[l] == p.paused[l] {
			continue
		}
		if want[l] {
			s.PauseReading()
			p.shown[l].pauses.Add(1)
		} else {
			s.ResumeReading()
		}
		p.paused[l] = want[l]
		p.shown[l].paused.Store(want[l])
	}
}

func (p *levelPauser) resumeAll() {
	for l, s := range p.src {
		if s != nil && p.paused[l] {
			s.ResumeReading()
			p.paused[l] = false
			p.shown[l].paused.Store(false)
		}
	}
}
