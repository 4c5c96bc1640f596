package service

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus metrics, labelled with the model
// name. With no registry they are kept but not exported.
type metrics struct {
	ingested, rejectedMsgs, versions, failures prometheus.Counter
	rejected                                   *prometheus.CounterVec
	retrain                                    prometheus.Histogram
	loglik, wkl, version, seq, pending         prometheus.Gauge
}

// Rejection reasons (label reason of emsf_serve_transitions_rejected_total).
const (
	reasonState   = "state_out_of_range"
	reasonAction  = "action_out_of_range"
	reasonSize    = "model_too_large"
	reasonCount   = "count_limit"
	reasonInvalid = "invalid"
)

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	labels := prometheus.Labels{"model": name}
	counter := func(n, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "emsf", Subsystem: "serve", Name: n, Help: help, ConstLabels: labels})
	}
	gauge := func(n, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "emsf", Subsystem: "serve", Name: n, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		ingested:     counter("transitions_ingested_total", "Transitions (rows) counted from the stream."),
		rejectedMsgs: counter("messages_rejected_total", "Stream messages whose payload could not be read (none of their rows counted)."),
		versions:     counter("versions_total", "Model versions published by this process."),
		failures:     counter("retrain_failures_total", "Retrains that ended in an error."),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "emsf", Subsystem: "serve", Name: "transitions_rejected_total",
			Help: "Transitions rejected, by reason: outside the fixed size (--states/--actions) or the limits (--max-states/--max-actions/--max-model-bytes), or a count that would take the total above 2^53.", ConstLabels: labels}, []string{"reason"}),
		retrain: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "emsf", Subsystem: "serve", Name: "retrain_duration_seconds",
			Help: "Wall time of a retrain, from the snapshot of the counts to the stored version.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}),
		loglik:  gauge("loglik", "Log-likelihood of all counts under the latest version."),
		wkl:     gauge("wkl", "Weighted KL divergence (DESIGN.md §2) of the latest version on all counts."),
		version: gauge("model_version", "Latest model version."),
		seq:     gauge("stream_sequence", "Last stream sequence counted."),
		pending: gauge("pending_transitions", "Transitions counted since the latest version."),
	}
	for _, r := range []string{reasonState, reasonAction, reasonSize, reasonCount, reasonInvalid} {
		m.rejected.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.ingested, m.rejectedMsgs, m.versions, m.failures, m.rejected, m.retrain,
		m.loglik, m.wkl, m.version, m.seq, m.pending} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("service: register metrics: %w", err)
		}
	}
	return m, nil
}
