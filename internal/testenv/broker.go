package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaBroker is a single-node Apache Kafka broker in KRaft mode, started
// from its jars on loopback ports.
type KafkaBroker struct {
	// Addr is the PLAINTEXT listener; SASLAddr a SASL_PLAINTEXT listener
	// that takes PLAIN with SASLUser / SASLPassword.
	Addr, SASLAddr string
	cmd            *exec.Cmd
	dir            string
	log            *os.File
}

// SASL credentials of the SASL listener.
const (
	SASLUser     = "admin"
	SASLPassword = "admin-secret"
)

// KafkaLibsEnv names the variable that points at the broker's jars (see
// internal/testenv/kafka/fetch-jars.sh).
const KafkaLibsEnv = "SLUICE_KAFKA_LIBS"

// StartKafka starts a broker from the jars in libs and waits, up to two
// minutes, until it serves metadata.
func StartKafka(libs string) (*KafkaBroker, error) {
	if _, err := os.Stat(filepath.Join(libs, "kafka_2.13-4.1.0.jar")); err != nil {
		return nil, fmt.Errorf("kafka jars not found in %q (run internal/testenv/kafka/fetch-jars.sh): %w", libs, err)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("java (17+) is needed to run the Kafka broker: %w", err)
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-kafka-")
	if err != nil {
		return nil, err
	}
	b := &KafkaBroker{
		Addr:     fmt.Sprintf("127.0.0.1:%d", ports[0]),
		SASLAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		dir:      dir,
	}
	props := strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", ports[2]),
		fmt.Sprintf("listeners=PLAINTEXT://%s,SASL_PLAINTEXT://%s,CONTROLLER://127.0.0.1:%d", b.Addr, b.SASLAddr, ports[2]),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://%s,SASL_PLAINTEXT://%s", b.Addr, b.SASLAddr),
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
		"sasl.enabled.mechanisms=PLAIN",
		fmt.Sprintf(`listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="%s" password="%s" user_%s="%s";`,
			SASLUser, SASLPassword, SASLUser, SASLPassword),
		"log.dirs=" + filepath.Join(dir, "data"),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=4",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		"group.min.session.timeout.ms=500",
		"auto.create.topics.enable=false",
	}, "\n") + "\n"
	conf := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(conf, []byte(props), 0o644); err != nil {
		return nil, err
	}
	cp := filepath.Join(libs, "*")
	format := exec.Command(java, "-cp", cp, "kafka.tools.StorageTool", "format",
		"-t", clusterID(), "-c", conf)
	if out, err := format.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("formatting kafka storage: %w\n%s", err, out)
	}
	b.log, err = os.Create(filepath.Join(dir, "broker.log"))
	if err != nil {
		return nil, err
	}
	b.cmd = exec.Command(java, "-Xms256m", "-Xmx768m", "-cp", cp, "kafka.Kafka", conf)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := b.waitReady(2 * time.Minute); err != nil {
		logTail, _ := os.ReadFile(b.log.Name())
		b.Stop()
		return nil, fmt.Errorf("%w\nbroker log:\n%s", err, Tail(logTail, 4000))
	}
	return b, nil
}

func (b *KafkaBroker) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			cancel()
			cl.Close()
			if err == nil {
				return nil
			}
		}
		if b.cmd.ProcessState != nil {
			return errors.New("kafka broker exited")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafka broker not ready after %v: %w", limit, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Stop stops the broker and removes its data.
func (b *KafkaBroker) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = b.cmd.Process.Kill()
			<-done
		}
	}
	if b.log != nil {
		b.log.Close()
	}
	os.RemoveAll(b.dir)
}

// CreateTopic creates topic with the given partitions on brokers.
func CreateTopic(brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 {
			msg := ""
			if t.ErrorMessage != nil {
				msg = *t.ErrorMessage
			}
			return fmt.Errorf("creating topic %s: error code %d %s", t.Topic, t.ErrorCode, msg)
		}
	}
	return nil
}

// FreePorts returns n loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Tail returns the last n bytes of b, for logs in test failures.
func Tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// WithKafka is the TestMain of an integration suite: it starts a broker
// from the jars named by $SLUICE_KAFKA_LIBS, hands it to use, runs the
// tests and stops the broker. It returns the exit code.
func WithKafka(m interface{ Run() int }, use func(*KafkaBroker)) int {
	began := time.Now()
	b, err := StartKafka(os.Getenv(KafkaLibsEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the Kafka broker:", err)
		return 1
	}
	defer b.Stop()
	fmt.Fprintf(os.Stderr, "Apache Kafka 4.1.0 broker on %s (SASL on %s), started in %v\n", b.Addr, b.SASLAddr, time.Since(began).Round(time.Millisecond))
	use(b)
	return m.Run()
}

// clusterID returns a random Kafka cluster id: 16 bytes, URL-safe base64.
// Its first character is never '-' (the top bit of the first byte is
// cleared): the storage tool would read such an id as a flag, and the
// broker would not start about once in 64.
func clusterID() string {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	id[0] &= 0x7f
	return base64.RawURLEncoding.EncodeToString(id)
}
