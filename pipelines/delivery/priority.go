package delivery

import (
	"fmt"

	"github.com/sluice-streams/sluice/flow"
)

// The levels of priority of a request, 0 the highest: the
// scheduler reads one topic per level and serves its steps by level
// (stream.Envelope.Priority).
const (
	High   = 0
	Normal = 1
	Low    = 2
	// Levels is the number of levels.
	Levels = 3
)

// LevelNames names the levels, highest first: stage names, status lines.
var LevelNames = [Levels]string{"high", "normal", "low"}

// Tier is an account's tier, as the accounts service says it.
type Tier string

// The tiers: a paying customer's requests are served first.
const (
	Paying Tier = "paying"
	Free   Tier = "free"
)

// Level is the level of priority of a request of an owner of this tier
// when the request says none: paying customers high, every other account
// (free, or a tier the service did not say or this version does not know)
// low: only the accounts service's word makes a request high.
func (t Tier) Level() int {
	if t == Paying {
		return High
	}
	return Low
}

// Account is what the accounts service answers for an owner it allows.
type Account struct {
	Tier Tier `json:"tier,omitempty"`
}

// PriorityOf returns the level p is served at once its account is checked:
// the request's own priority if it has one, else its owner's tier's level.
// A request's own priority out of range is an error wrapping
// flow.ErrPriorityOutOfRange (Validate refuses it before any step).
func PriorityOf(p *Progress) (int, error) {
	if r := p.Request.Priority; r != nil {
		if *r < 0 || *r >= Levels {
			return 0, fmt.Errorf("%w: request priority %d, want 0 (highest) to %d", flow.ErrPriorityOutOfRange, *r, Levels-1)
		}
		return *r, nil
	}
	return p.Tier.Level(), nil
}

// Prio returns a pointer to level, for Request.Priority.
func Prio(level int) *int { return &level }
