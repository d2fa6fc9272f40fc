package demo

// VerifyOption changes where a verification (Verify, Accounted,
// VerifyRemote, DeadLettersWritten) looks.
type VerifyOption func(*verifyConfig)

type verifyConfig struct {
	deadLetters, compensationDeadLetters, failures string
}

// FailuresTopic names the scheduler's compensation events topic (`sluice
// run delivery -failures-topic`, default delivery-failures), which a
// verification reads to tell why each request was compensated.
func FailuresTopic(topic string) VerifyOption {
	return func(c *verifyConfig) {
		if topic != "" {
			c.failures = topic
		}
	}
}

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
	c := verifyConfig{deadLetters: topicDead, compensationDeadLetters: topicSupervisorDead, failures: topicFailures}
	for _, o := range opts {
		o(&c)
	}
	return c
}
