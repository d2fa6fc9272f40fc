// Package sensors is a home-security workload, built from
// sluice's public API as a user would: readings of the sensors of many
// homes arrive on a Kafka topic keyed by home; several instances share the
// topic's partitions through the Redis ownership balancer
// (source/ownership), parse and filter the readings, aggregate them per
// home and event-time minute (flow.Tumbling) and write each minute's
// aggregate to Redis, idempotently, before the readings are settled and
// checkpointed. A web page served by each worker shows a home's last hour
// and an overview of all homes.
//
//	readings (key: home id) -> ownership balancer (Kafka partitions, Redis leases)
//	  -> parse (malformed -> dead letter) -> filter (heartbeats, out-of-range: counted)
//	  -> window per home per minute (late -> dead letter)
//	  -> write the minute's aggregates to Redis (pipelined, conditional)
//	  -> checkpoint (Redis, fenced by the lease's epoch)
//
// # Readings
//
// A reading is a Kafka record whose key is the home id and whose value is
// four comma-separated fields:
//
//	<sensor id>,<kind>,<event time, Unix ms>,<value>
//	s2,door,1763899200000,1
//
// Kinds are motion, door, glass (0 or 1: 1 is motion seen, a door open,
// glass broken), co (carbon monoxide in ppm, 0 to 1000) and heartbeat (the
// sensor is alive; value ignored). A reading is an event when it reports
// something: motion, door or glass at 1, co at EventCO ppm or more; it is
// an alarm when glass breaks or co reaches AlarmCO.
//
// # Aggregates in Redis
//
// One hash per home, a field per minute (its start, Unix seconds) and
// partition the home's readings of it were read from:
//
//	sensors:{<namespace>}:home:<home id>   <minute>/<partition> -> <partition>|<first offset>|<readings>|<aggregate JSON>
//	sensors:{<namespace>}:minute:<minute>  <partition> -> <partition>|<first offset>|<readings>|<totals JSON>
//
// A write is conditional (a Lua script): it replaces the stored value only
// if it holds what the stored one holds, judged by the window's first
// offset and count (flow.Pane), so replays and reassignments converge to
// the aggregate of every reading of the partition, never to one counted
// twice or partly. A home's minute is the sum of its parts: one, unless
// its readings were in several partitions — partitions added to the
// topic while it runs move a home to another one (the record key decides
// it, modulo the partition count), and a producer may pick partitions
// itself. So partitions can be added to a live topic: the workers take
// the new ones within an ownership interval, read them from their start,
// and every minute is stored whole. (A minute's totals count such a home
// once in each partition.) Fields of a minute alone, without its
// partition, as earlier versions wrote them, are read as one more
// version of their partition's part.
//
// A minute closed idle (its partition quiet for IdleClose) makes later
// readings of it late. With producer timestamps (CreateTime), a record
// held by its producer longer than IdleClose may come after that: the
// instance that closed the minute dead-letters it, but if that instance
// dies first and the next owner's replay starts inside the minute, the
// replay's aggregate loses to the stored one (which began earlier) and
// the record is settled uncounted. A topic with
// message.timestamp.type=LogAppendTime rules this out.
//
// Event times must lie between 2000 and 2200, and at most MaxAhead (a
// minute) after the record's timestamp, and a record's timestamp at most
// MaxClockAhead (a minute) after the worker's clock (the producer's clock
// is wrong: the window would take it as the partition's time); a reading
// that reaches the topic more than the lateness (30 s) after its event
// time is late. All go to the dead-letter topic with the reason.
package sensors
