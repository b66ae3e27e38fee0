// Package store keeps the host's persistent records: state files written
// atomically, ownership locks, process identity checks, and the agent binary
// that goes into neurons. It knows nothing of any sandbox backend.
package store
