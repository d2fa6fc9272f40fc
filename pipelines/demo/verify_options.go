package demo

// VerifyOption changes where a verification (Verify, Accounted,
// VerifyRemote, DeadLettersWritten) looks.
type VerifyOption func(*verifyConfig)

type verifyConfig struct {
	deadLetters, compensationDeadLetters string
	refusals                             int
}

// Refusals says how many calls the services refused for good on purpose
// (delivery.Ledger.Refusals, LedgerTotals.Refusals): up to that many
// deliverable requests may be compensated; any more could have
// completed, and fail the verification (Summary.Needless).
func Refusals(n int) VerifyOption { return func(c *verifyConfig) { c.refusals = n } }

// DeadLetterTopics names the dead-letter topics a verification reads:
// the scheduler's (`sluice run delivery -dead-letter-topic`, default
// delivery-dead-letters) and the supervisor's (`sluice run supervisor
// -supervisor-dead-letter-topic`, default
// delivery-compensation-dead-letters), for a deployment whose workers
// write elsewhere. An empty name keeps the default.
func DeadLetterTopics(scheduler, supervisor string) VerifyOption {
	return func(c *verifyConfig) {
		if scheduler != "" {
			c.deadLetters = scheduler
		}
		if supervisor != "" {
			c.compensationDeadLetters = supervisor
		}
	}
}

func verifyOptions(opts []VerifyOption) verifyConfig {
	c := verifyConfig{deadLetters: topicDead, compensationDeadLetters: topicSupervisorDead}
	for _, o := range opts {
		o(&c)
	}
	return c
}
