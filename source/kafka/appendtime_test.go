package kafka_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A record of a topic whose timestamps are the broker's (LogAppendTime)
// arrives with AppendTime set and the broker's time; one whose producer
// stamped it (CreateTime) with AppendTime false and the producer's time.
// kfake applies no topic's message.timestamp.type, so the test marks the
// batches produced to "appended" as a broker with LogAppendTime would
// store them, before kfake appends them.
func TestAppendTimeSaysWhoStampedTheRecord(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "appended", "created"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Produce requests name topics by ID (version 13 on).
	topics, err := kadm.NewClient(cl).ListTopics(context.Background(), "appended")
	if err != nil {
		t.Fatal(err)
	}
	id := topics["appended"].ID
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		for i := range req.Topics {
			if req.Topics[i].Topic != "appended" && req.Topics[i].TopicID != id {
				continue
			}
			for j := range req.Topics[i].Partitions {
				p := &req.Topics[i].Partitions[j]
				p.Records = logAppendTime(t, p.Records)
			}
		}
		return nil, nil, false
	})
	hourAgo := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produced := time.Now()
	for _, topic := range []string{"appended", "created"} {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte(topic), Timestamp: hourAgo}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]stream.Envelope{}
	consume(t, newSource(t, brokers, "stamps", func(c *kafka.Config) {
		c.Topics = []string{"appended", "created"}
		// kfake writes the broker's time into the batch without redoing
		// its checksum, as a real broker would.
		c.Opts = append(c.Opts, kgo.DisableFetchCRCValidation())
	}), 2,
		func(m stream.Message[[]byte]) { got[m.Topic] = m.Envelope })
	if e := got["created"]; e.AppendTime || !e.Timestamp.Equal(hourAgo) {
		t.Errorf("CreateTime record: AppendTime %v, Timestamp %v; want false and the producer's %v", e.AppendTime, e.Timestamp, hourAgo)
	}
	if e := got["appended"]; !e.AppendTime || e.Timestamp.Before(produced.Add(-time.Second)) {
		t.Errorf("LogAppendTime record: AppendTime %v, Timestamp %v; want true and the broker's (after %v)", e.AppendTime, e.Timestamp, produced)
	}
}

// logAppendTime returns the record batch in records with the attribute
// that says its timestamps are the broker's, and its checksum redone.
func logAppendTime(t *testing.T, records []byte) []byte {
	var b kmsg.RecordBatch
	if err := b.ReadFrom(records); err != nil {
		t.Errorf("reading a produced batch: %v", err)
		return records
	}
	b.Attributes |= 0x08 // bit 3: LogAppendTime
	raw := b.AppendTo(nil)
	// The CRC (bytes 17-20) covers everything from the attributes on.
	binary.BigEndian.PutUint32(raw[17:21], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
