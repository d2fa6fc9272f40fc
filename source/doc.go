// Package source holds the stages that bring messages into a pipeline.
// This file's siblings are the basic ones for tests, examples and demos:
// Slice, Channel and Generator. Connectors to brokers live in
// subpackages.
package source
