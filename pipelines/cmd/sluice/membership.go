package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/source/kafka"
)

// membership closes a worker's Kafka sources on every way out: each makes
// its last commit and leaves its group. A static member (-instance-id)
// does not leave when it stops on SIGTERM — it is expected back, and then
// takes its partitions again with no rebalance — but it does when the
// worker fails (leave): a worker restarted again and again must not hold
// partitions away from the healthy ones.
type membership struct {
	cl       *kgo.Client // any client of the cluster, to leave on a static member's behalf
	logger   *slog.Logger
	instance string
	leave    bool

	members []member
	closed  bool
}

type member struct {
	src           *kafka.Source
	group, suffix string
}

func (ms *membership) add(src *kafka.Source, group, suffix string) {
	ms.members = append(ms.members, member{src, group, suffix})
}

// close commits, closes and, for a failed static member, leaves; once.
func (ms *membership) close() error {
	if ms.closed {
		return nil
	}
	ms.closed = true
	var errs []error
	for _, m := range ms.members {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		if err := m.src.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", m.group, err))
		}
		if ms.leave && ms.instance != "" {
			if err := leaveStatic(ctx, ms.cl, m.group, ms.instance+m.suffix); err != nil {
				ms.logger.Warn("could not leave the group: its partitions wait for the session timeout",
					"group", m.group, "instance_id", ms.instance+m.suffix, "err", err)
			}
		}
		cancel()
	}
	return errors.Join(errs...)
}

// leaveStatic removes the static member instance from group, as its own
// client does not on close.
func leaveStatic(ctx context.Context, cl *kgo.Client, group, instance string) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	m := kmsg.NewLeaveGroupRequestMember()
	m.InstanceID = &instance
	req.Members = []kmsg.LeaveGroupRequestMember{m}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	for _, m := range resp.Members {
		if err := kerr.ErrorForCode(m.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownMemberID) {
			return err
		}
	}
	return nil
}
