// Package pipelines holds ready pipelines built only from sluice's public
// API, as a user would build them, and the worker binary in cmd/sluice.
package pipelines
