package redisstream

import (
	"time"

	"github.com/sluice-streams/sluice/internal/redisentry"
)

// Record is a record as a stream entry's fields hold it: the value field,
// the "key" field, and a "h:<name>" field per header, in order.
type Record = redisentry.Record

// Decode reads a record from an entry's fields, given as name, value,
// name, value... in the entry's order (as XRANGE returns them), the value
// under valueField ("value" if empty). It fails on an odd number of
// strings.
func Decode(valueField string, fields []string) (Record, error) {
	return redisentry.Decode(valueField, fields)
}

// Offset returns the offset that carries entry ID id: a message the
// source reads has it as its Offset, increasing in the stream's order.
func Offset(id string) (int64, error) { return redisentry.Offset(id) }

// EntryID returns the entry ID a message's Offset carries.
func EntryID(offset int64) string { return redisentry.ID(offset) }

// EntryTime returns when the entry whose ID an Offset carries was added,
// on the Redis server's clock (the ID's milliseconds).
func EntryTime(offset int64) time.Time { return time.UnixMilli(offset >> redisentry.SeqBits) }
