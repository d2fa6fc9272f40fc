package main

import "flag"

// The transports the requests and every topic's records can travel on.
const (
	transportKafka = "kafka"
	transportRedis = "redis"
)

// transportVar defines -transport on fs: Kafka topics (the default), or
// Redis streams of the same names on the server of -redis.
func transportVar(fs *flag.FlagSet) *choiceFlag {
	return choiceVar(fs, "transport", transportKafka, "where the requests and the other topics' records travel",
		choice{transportKafka, "Kafka topics on -brokers"},
		choice{transportRedis, "Redis streams of the same names on the server of -redis, read in consumer groups"})
}
