package boot

// EgressStats is what an egress proxy reports of the traffic it let
// through since it started: the host hands the proxy's process an open
// file of its own (nsbox: descriptor NsboxEgressStatsFD, with
// NsboxEgress.StatsFD set; a VM's tunnel: --stats-fd) and reads it for a
// neuron's metrics. The proxy rewrites it whole (JSON) as the figures
// change, at most once a second; the host reads it as untrusted input.
type EgressStats struct {
	// Bytes is what went through in both directions, after the request's
	// head.
	Bytes int64 `json:"bytes"`
	// Connections counts the connections made to allowed destinations.
	Connections int64 `json:"connections"`
}

// NsboxEgressStatsFD is where nsbox's PID 1 finds the file for its
// proxy's EgressStats, when NsboxEgress.StatsFD says so.
const NsboxEgressStatsFD = 4
