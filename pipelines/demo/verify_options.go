package demo

// VerifyOption changes where a verification (Verify, Accounted,
// VerifyRemote, DeadLettersWritten) looks.
type VerifyOption func(*verifyConfig)

type verifyConfig struct {
	deadLetters, compensationDeadLetters, failures string
	reader                                         Reader
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
