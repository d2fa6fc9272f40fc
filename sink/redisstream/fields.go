package redisstream

import "github.com/sluice-streams/sluice/internal/redisentry"

// AppendFields appends to dst the XADD field-value pairs of e, as the sink
// writes them: "value", "key" if e has one, and "h:<name>" per header in
// order. A program or a test that adds entries for a sluice source itself
// (redis.XAddArgs.Values) writes them so.
func AppendFields(dst []any, e Entry) []any {
	return redisentry.AppendFields(dst, redisentry.FieldValue, e.Key, e.Value, e.Headers)
}
