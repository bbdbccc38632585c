package autoscale

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// metrics are the controller's Prometheus metrics.
type metrics struct {
	syncs        *prometheus.CounterVec
	syncDuration prometheus.Histogram
	desired      *prometheus.GaugeVec
	throughput   *prometheus.GaugeVec
	goodput      *prometheus.GaugeVec
	scaleEvents  *prometheus.CounterVec
	isLeader     prometheus.Gauge
	queue        workqueue.MetricsProvider
}

// Results of a sync, the syncs_total counter's result label.
const (
	resultSuccess = "success"
	resultError   = "error"
)

// newMetrics registers the controller's metrics with reg (nil: a fresh
// registry, for a controller whose metrics nobody reads).
func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringside_autoscale_syncs_total",
			Help: "Syncs of an ElasticScaler, by result (success or error).",
		}, []string{"result"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ringside_autoscale_sync_duration_seconds",
			Help: "Time one sync of an ElasticScaler took: reading the target's scale and the job's status, deciding, writing.",
			// 1 ms to 16 s: a sync is a few API and etcd round trips.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringside_autoscale_desired_replicas",
			Help: "The replicas an ElasticScaler last decided for its target.",
		}, []string{"namespace", "name"}),
		throughput: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringside_autoscale_throughput_samples_per_second",
			Help: "The job's throughput at its current world size, as an ElasticScaler's status averages it; absent while none is measured there recently.",
		}, []string{"namespace", "name"}),
		goodput: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ringside_autoscale_goodput_samples_per_second",
			Help: "The job's goodput at its current world size (throughput times the statistical efficiency of its batch), as an ElasticScaler's status holds it; absent while none is measured there recently.",
		}, []string{"namespace", "name"}),
		scaleEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringside_autoscale_scale_events_total",
			Help: "Changes of a target's replicas the controller made, by direction (up or down).",
		}, []string{"direction"}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringside_autoscale_is_leader",
			Help: "1 while this controller holds the leader lease and syncs, 0 while it stands by.",
		}),
	}
	m.syncs.WithLabelValues(resultSuccess)
	m.syncs.WithLabelValues(resultError)
	m.scaleEvents.WithLabelValues("up")
	m.scaleEvents.WithLabelValues("down")
	reg.MustRegister(m.syncs, m.syncDuration, m.desired, m.throughput, m.goodput, m.scaleEvents, m.isLeader)
	m.queue = newQueueMetrics(reg)
	return m
}

// queueMetrics exports the workqueue's metrics under the controller's
// names (ringside_autoscale_workqueue_*), labelled by the queue's name.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = (*queueMetrics)(nil)

func newQueueMetrics(reg prometheus.Registerer) *queueMetrics {
	const prefix = "ringside_autoscale_workqueue_"
	label := []string{"name"}
	// 1 ms to about 16 min: a key waits a sync period between resyncs.
	buckets := prometheus.ExponentialBuckets(0.001, 4, 11)
	q := &queueMetrics{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + "depth", Help: "Keys waiting in the workqueue."}, label),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + "unfinished_work_seconds", Help: "Seconds of work in progress not yet done."}, label),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + "longest_running_processor_seconds", Help: "Seconds the longest running sync has run."}, label),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "adds_total", Help: "Keys added to the workqueue."}, label),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: prefix + "retries_total", Help: "Keys put back after a failed sync."}, label),
		latency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "queue_duration_seconds", Help: "Seconds a key waited in the workqueue.", Buckets: buckets}, label),
		work:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "work_duration_seconds", Help: "Seconds a sync of a key took.", Buckets: buckets}, label),
	}
	reg.MustRegister(q.depth, q.unfinished, q.longest, q.adds, q.retries, q.latency, q.work)
	return q
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}

func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}

func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}

func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}
