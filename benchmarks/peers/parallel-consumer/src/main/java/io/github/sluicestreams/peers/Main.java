package io.github.sluicestreams.peers;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import io.confluent.parallelconsumer.internal.DrainingCloseable.DrainingMode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The Confluent parallel-consumer peer of the peers benchmark (issue 18; the protocol is in
 * benchmarks/peers/runner): a ParallelStreamProcessor over a KafkaConsumer, ordering UNORDERED
 * or KEY, maxConcurrency 256 worker threads, the default commit mode
 * (PERIODIC_CONSUMER_ASYNCHRONOUS). The 2 ms call is a Thread.sleep in the core module's worker
 * pool: the documented core way to run blocking IO ("set maxConcurrency much higher than core
 * count, as these threads will spend most of their time blocked waiting for IO"); a sleeping
 * thread burns no CPU.
 */
public final class Main {
  /** Wall clock in Unix nanoseconds from the monotonic clock. */
  private static final long EPOCH_BASE_NS =
      System.currentTimeMillis() * 1_000_000L - System.nanoTime();

  static long nowUnixNs() {
    return EPOCH_BASE_NS + System.nanoTime();
  }

  static final AtomicBoolean FIRST = new AtomicBoolean();
  static volatile long firstUnixNs;

  /**
   * When the KafkaConsumer handed each polled batch to parallel-consumer: per partition, the first
   * offset of a batch to the time it was polled (looked up with floorEntry).
   */
  static final ConcurrentHashMap<Integer, ConcurrentSkipListMap<Long, Long>> POLLED =
      new ConcurrentHashMap<>();

  /** Stamps polled batches and prints the "first" line on the first record. */
  public static final class Stamp implements ConsumerInterceptor<byte[], byte[]> {
    @Override
    public ConsumerRecords<byte[], byte[]> onConsume(ConsumerRecords<byte[], byte[]> records) {
      if (records.isEmpty()) {
        return records;
      }
      long now = nowUnixNs();
      if (FIRST.compareAndSet(false, true)) {
        firstUnixNs = now;
        synchronized (System.out) {
          System.out.println("{\"event\":\"first\",\"unix_ms\":" + (now / 1_000_000L) + "}");
          System.out.flush();
        }
      }
      for (TopicPartition tp : records.partitions()) {
        List<ConsumerRecord<byte[], byte[]>> rs = records.records(tp);
        POLLED
            .computeIfAbsent(tp.partition(), p -> new ConcurrentSkipListMap<>())
            .put(rs.get(0).offset(), now);
      }
      return records;
    }

    @Override
    public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {}

    @Override
    public void close() {}

    @Override
    public void configure(Map<String, ?> configs) {}
  }

  /** One worker thread's figures, merged at the end. */
  static final class Stats {
    long[] latency = new long[4096];
    long[] inproc = new long[4096];
    int n;
    final TreeMap<Integer, Long> perPartition = new TreeMap<>();

    synchronized void add(int partition, long lat, long inp) {
      if (n == latency.length) {
        latency = Arrays.copyOf(latency, n * 2);
        inproc = Arrays.copyOf(inproc, n * 2);
      }
      latency[n] = lat;
      inproc[n] = inp;
      n++;
      perPartition.merge(partition, 1L, Long::sum);
    }
  }

  static final ConcurrentLinkedQueue<Stats> ALL = new ConcurrentLinkedQueue<>();
  static final ThreadLocal<Stats> STATS =
      ThreadLocal.withInitial(
          () -> {
            Stats s = new Stats();
            ALL.add(s);
            return s;
          });
  static final AtomicLong IN_FLIGHT = new AtomicLong();
  static final AtomicLong MAX_IN_FLIGHT = new AtomicLong();

  /** Parses a Go duration of one unit: 2ms, 500us, 1s, 100ns. */
  static long parseDurationNs(String s) {
    String[][] units = {{"ns", "1"}, {"us", "1000"}, {"µs", "1000"}, {"ms", "1000000"},
        {"s", "1000000000"}};
    for (String[] u : units) {
      if (s.endsWith(u[0])) {
        String num = s.substring(0, s.length() - u[0].length());
        return Math.round(Double.parseDouble(num) * Long.parseLong(u[1]));
      }
    }
    throw new IllegalArgumentException("bad duration " + s);
  }

  static double quantileMs(long[] v, int n, double q) {
    if (n == 0) {
      return 0;
    }
    Arrays.sort(v, 0, n);
    return v[(int) (q * (n - 1))] / 1e6;
  }

  static String jsonString(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    return b.append('"').toString();
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> flags = new ConcurrentHashMap<>();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (!a.startsWith("-")) {
        usage("unexpected argument " + a);
      }
      String name = a.replaceFirst("^--?", "");
      String value;
      int eq = name.indexOf('=');
      if (eq >= 0) {
        value = name.substring(eq + 1);
        name = name.substring(0, eq);
      } else if (i + 1 < args.length) {
        value = args[++i];
      } else {
        usage("flag needs a value: " + a);
        return;
      }
      flags.put(name, value);
    }
    String brokers = flags.get("brokers");
    String topic = flags.getOrDefault("topic", "peers");
    String group = flags.get("group");
    String order = flags.getOrDefault("order", "unordered");
    int inflight = Integer.parseInt(flags.getOrDefault("inflight", "256"));
    long workNs = parseDurationNs(flags.getOrDefault("work", "2ms"));
    if (brokers == null || group == null || !(order.equals("unordered") || order.equals("key"))) {
      usage("need -brokers, -group and -order unordered|key");
    }

    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.CLIENT_ID_CONFIG, "peers-parallel-consumer");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    // parallel-consumer commits the offsets itself; it requires auto commit off.
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(
        ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    props.put(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG, Stamp.class.getName());
    KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);

    ProcessingOrder ordering = order.equals("key") ? ProcessingOrder.KEY : ProcessingOrder.UNORDERED;
    ParallelConsumerOptions<byte[], byte[]> options =
        ParallelConsumerOptions.<byte[], byte[]>builder()
            .consumer(consumer)
            .ordering(ordering)
            .maxConcurrency(inflight)
            .commitMode(CommitMode.PERIODIC_CONSUMER_ASYNCHRONOUS)
            // The library's default interval is Kafka's 5 s; 1 s, like Sarama's and franz-go's
            // autocommit, keeps the end of a run from waiting up to 5 s for the last commit.
            .commitInterval(Duration.ofSeconds(1))
            .build();
    ParallelStreamProcessor<byte[], byte[]> pc =
        ParallelStreamProcessor.createEosStreamProcessor(options);

    CountDownLatch term = new CountDownLatch(1);
    // SIGTERM replaces the JVM's default handler, so the JVM does not start shutting down (and
    // exit 143): main stops parallel-consumer, prints the final line and exits 0.
    sun.misc.Signal.handle(new sun.misc.Signal("TERM"), sig -> term.countDown());
    sun.misc.Signal.handle(new sun.misc.Signal("INT"), sig -> term.countDown());

    pc.subscribe(List.of(topic));
    pc.poll(
        ctx -> {
          ConsumerRecord<byte[], byte[]> r = ctx.getSingleConsumerRecord();
          long received = nowUnixNs();
          ConcurrentSkipListMap<Long, Long> polled = POLLED.get(r.partition());
          if (polled != null) {
            Map.Entry<Long, Long> e = polled.floorEntry(r.offset());
            if (e != null) {
              received = e.getValue();
            }
          }
          long n = IN_FLIGHT.incrementAndGet();
          MAX_IN_FLIGHT.accumulateAndGet(n, Math::max);
          try {
            Thread.sleep(workNs / 1_000_000L, (int) (workNs % 1_000_000L));
          } catch (InterruptedException ie) {
            IN_FLIGHT.decrementAndGet();
            Thread.currentThread().interrupt();
            throw new RuntimeException("interrupted", ie);
          }
          long done = nowUnixNs();
          IN_FLIGHT.decrementAndGet();
          long from = Math.max(r.timestamp() * 1_000_000L, firstUnixNs);
          STATS.get().add(r.partition(), done - from, done - received);
        });

    term.await();
    Thread closer =
        new Thread(
            () -> {
              try {
                pc.close(Duration.ofSeconds(5), DrainingMode.DONT_DRAIN);
              } catch (Throwable t) {
                System.err.println("close: " + t);
              }
            });
    closer.setDaemon(true);
    closer.start();
    closer.join(TimeUnit.SECONDS.toMillis(7));
    if (closer.isAlive()) {
      System.err.println("parallel-consumer did not close within 7 s; reporting anyway");
    }

    long processed = 0;
    TreeMap<Integer, Long> per = new TreeMap<>();
    List<long[]> lats = new ArrayList<>();
    List<long[]> inps = new ArrayList<>();
    List<Integer> ns = new ArrayList<>();
    for (Stats s : ALL) {
      synchronized (s) {
        processed += s.n;
        s.perPartition.forEach((p, c) -> per.merge(p, c, Long::sum));
        lats.add(Arrays.copyOf(s.latency, s.n));
        inps.add(Arrays.copyOf(s.inproc, s.n));
        ns.add(s.n);
      }
    }
    long[] lat = new long[(int) processed];
    long[] inp = new long[(int) processed];
    int at = 0;
    for (int i = 0; i < lats.size(); i++) {
      System.arraycopy(lats.get(i), 0, lat, at, ns.get(i));
      System.arraycopy(inps.get(i), 0, inp, at, ns.get(i));
      at += ns.get(i);
    }

    StringBuilder b = new StringBuilder();
    b.append("{\"event\":\"final\",\"processed\":").append(processed).append(",\"per_partition\":{");
    boolean firstEntry = true;
    for (Map.Entry<Integer, Long> e : per.entrySet()) {
      if (!firstEntry) {
        b.append(',');
      }
      firstEntry = false;
      b.append('"').append(e.getKey()).append("\":").append(e.getValue());
    }
    b.append("},\"p50_ms\":").append(quantileMs(lat, at, 0.50));
    b.append(",\"p99_ms\":").append(quantileMs(lat, at, 0.99));
    b.append(",\"p99_inproc_ms\":").append(quantileMs(inp, at, 0.99));
    b.append(",\"semantics\":\"at-least-once\"");
    String notes =
        "parallel-consumer-core 0.5.3.2 (kafka-clients 3.7.0), ordering "
            + ordering
            + ", maxConcurrency "
            + inflight
            + " worker threads, each call a Thread.sleep, commit mode PERIODIC_CONSUMER_ASYNCHRONOUS"
            + " (default) every 1 s (default 5 s); commits the lowest incomplete offset with the"
            + " completed offsets above it encoded in the commit metadata; max calls in flight seen "
            + MAX_IN_FLIGHT.get();
    b.append(",\"notes\":").append(jsonString(notes)).append('}');
    synchronized (System.out) {
      System.out.println(b);
      System.out.flush();
    }
    System.exit(0);
  }

  static void usage(String why) {
    System.err.println(
        why
            + "\nusage: Main -brokers host:port -topic t -group g -order unordered|key"
            + " -inflight n -work 2ms");
    System.exit(2);
  }
}
