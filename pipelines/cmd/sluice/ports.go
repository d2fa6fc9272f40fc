package main

// defaultListen is the address each command that serves HTTP listens on
// unless told otherwise (-listen): a port of its own each, so that any of
// them can run beside the others on one machine. docs/operating.md shows
// the table; TestDefaultPortsAreDistinct keeps both true.
var defaultListen = map[string]string{
	"demo":           "127.0.0.1:9464",
	"demo sensors":   "127.0.0.1:9465",
	"run delivery":   "127.0.0.1:9466",
	"run supervisor": "127.0.0.1:9467",
	"run sensors":    "127.0.0.1:9468",
	"services":       "127.0.0.1:8080",
}

// defaultBrokerPort is the dev broker's port (sluice broker -port); the
// commands' -brokers default to it on 127.0.0.1.
const defaultBrokerPort = 9092
