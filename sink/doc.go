// Package sink holds the stages that end a pipeline. The basic ones here
// (Discard, Collect, Func, dead letters) serve tests, examples and small
// jobs; connectors to brokers live in subpackages.
//
// A sink settles each message once it has done its work with it, and only
// then: that is what lets a source commit past the message.
package sink
