package demo

// VerifyOption changes where a verification (Verify, Accounted,
// VerifyRemote, DeadLettersWritten) looks.
type VerifyOption func(*verifyConfig)

type verifyConfig struct {
	deadLetters, compensationDeadLetters, failures string
	reader                                         Reader
	outcomesBefore                                 int
}

// ReadFrom reads the topics through r instead of the Kafka brokers: with
// RedisReader, the Redis streams of the topics' names, for workers that
// run on Redis Streams (the brokers are then not used, and may be nil).
func ReadFrom(r Reader) VerifyOption {
	return func(c *verifyConfig) {
		if r != nil {
			c.reader = r
		}
	}
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

// OutcomesBefore says how many outcomes the services and the dead-letter
// topic held when the load began (live deliveries, undone packages and
// dead letters: ledger totals and DeadLettersWritten), for services that
// keep the outcomes of earlier loads. Accounted then tells from the counts
// alone, cheaply, that this load's outcomes are not all in yet; without
// it, past the first load, every check reads the whole ledger and the
// dead letters, work that grows with every load the services saw.
func OutcomesBefore(n int) VerifyOption {
	return func(c *verifyConfig) { c.outcomesBefore = max(n, 0) }
}

// verifyOptions applies opts; the topics are read on the Kafka brokers
// unless ReadFrom says otherwise.
func verifyOptions(brokers []string, opts []VerifyOption) verifyConfig {
	c := verifyConfig{deadLetters: topicDead, compensationDeadLetters: topicSupervisorDead, failures: topicFailures}
	for _, o := range opts {
		o(&c)
	}
	if c.reader == nil {
		c.reader = KafkaReader(brokers)
	}
	return c
}
