package ownership

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/sluice-streams/sluice/stream"
)

// Static is one instance's place in a static layout, for users who do
// not want a balancer to move partitions: each instance reads the
// partition its index names (a Kubernetes StatefulSet pod's ordinal:
// pod "readers-3" reads partition 3). With several readers per partition,
// they split it by a hash of the record key: each processes the keys of
// its share and settles the others' records as filtered, and keeps its own
// checkpoints (its own group in the store), so every record is processed
// by exactly one reader.
//
// Give the balancer Fixed: []int32{s.Partition} and the store the group
// s.Group(group); filter with s.Mine on the record key:
//
//	st, err := ownership.NewStatic(index, 2, partitions)
//	store, _ := redisstore.New(redisstore.Config{..., Group: st.Group("sensors")})
//	bal, _ := ownership.NewBalancer[[]byte](store, src, ownership.Config{ID: pod, Fixed: []int32{st.Partition}})
//	mine := flow.FilterMessages(func(m *stream.Message[[]byte]) bool { return st.Mine(m.Key) })
//
// A reader restarted under the same id takes its partition back at once
// (its own lease); another id waits for the lease to expire. Changing the
// number of readers per partition changes which keys each share holds:
// stop them all, and start the new layout from checkpoints set with
// "sluice checkpoints set" for each new group.
type Static struct {
	// Index is the instance's index; Partition the partition it reads.
	Index     int
	Partition int32
	// Share is this reader's share of the partition's keys, among Shares
	// readers of the partition (Shares 1: the whole partition).
	Share, Shares int
}

// NewStatic places instance index in a layout of readersPerPartition
// readers for each of partitions (in order): indexes 0..r-1 read the
// first partition, r..2r-1 the second, and so on.
func NewStatic(index, readersPerPartition int, partitions []int32) (Static, error) {
	bad := func(arg, format string, a ...any) (Static, error) {
		return Static{}, fmt.Errorf("%w: %w", ErrConfig, &stream.ConfigError{Stage: "static layout", Argument: arg, Reason: fmt.Sprintf(format, a...)})
	}
	switch {
	case readersPerPartition < 1:
		return bad("readersPerPartition", "must be at least 1, got %d", readersPerPartition)
	case len(partitions) == 0:
		return bad("partitions", "the stream has no partitions")
	case index < 0 || index >= readersPerPartition*len(partitions):
		return bad("index", "%d: %d partitions with %d readers each take the indexes 0..%d",
			index, len(partitions), readersPerPartition, readersPerPartition*len(partitions)-1)
	}
	return Static{Index: index, Partition: partitions[index/readersPerPartition],
		Share: index % readersPerPartition, Shares: readersPerPartition}, nil
}

// Group returns the store's group for this reader: group itself with one
// reader per partition, else group + "/share-<share>-of-<shares>", so
// each reader of a partition keeps its own ownership record and
// checkpoint.
func (s Static) Group(group string) string {
	if s.Shares <= 1 {
		return group
	}
	return fmt.Sprintf("%s/share-%d-of-%d", group, s.Share, s.Shares)
}

// Mine reports whether a record with this key belongs to this reader's
// share: FNV-1a of the key modulo Shares (a record without a key belongs
// to share 0). Always true with one reader per partition.
func (s Static) Mine(key []byte) bool {
	if s.Shares <= 1 {
		return true
	}
	if len(key) == 0 {
		return s.Share == 0
	}
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32()%uint32(s.Shares)) == s.Share
}

// InstanceIndex returns the instance's index: flag if it is set (>= 0,
// an "-instance-index" flag), else the ordinal at the end of hostname (a
// StatefulSet pod's name, "readers-3": 3; Kubernetes sets $HOSTNAME to
// it).
func InstanceIndex(flag int, hostname string) (int, error) {
	if flag >= 0 {
		return flag, nil
	}
	i := strings.LastIndexByte(hostname, '-')
	n, err := strconv.Atoi(hostname[i+1:])
	if i < 0 || err != nil || n < 0 || strings.HasPrefix(hostname[i+1:], "+") {
		return 0, fmt.Errorf("%w: %w", ErrConfig, &stream.ConfigError{Stage: "static layout", Argument: "instance index",
			Reason: fmt.Sprintf("no -instance-index given, and the host name %q does not end in -<index> as a StatefulSet pod's does", hostname)})
	}
	return n, nil
}
