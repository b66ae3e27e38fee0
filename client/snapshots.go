package cortex

import (
	"context"
	"net/url"
)

// Snapshots lists neuron id's snapshots, oldest first.
func (c *Client) Snapshots(ctx context.Context, id string) ([]Snapshot, error) {
	var out struct {
		Snapshots []Snapshot `json:"snapshots"`
	}
	return out.Snapshots, c.call(ctx, "GET", snapshotsPath(id), nil, nil, &out)
}

// CreateSnapshot saves neuron id as snapshot name: a copy of its files,
// or a microVM whole. A name taken is an ExistsError.
func (c *Client) CreateSnapshot(ctx context.Context, id, name string) (*Snapshot, error) {
	var s Snapshot
	return &s, c.call(ctx, "POST", snapshotsPath(id), nil, &SnapshotCreate{Name: name}, &s)
}

// RestoreSnapshot brings neuron id back as snapshot name left it. From a
// copy of files the neuron is restarted (its processes end); a microVM
// comes back whole, its processes too. A snapshot of the other kind is a
// BadRequestError, and the neuron is left as it was.
func (c *Client) RestoreSnapshot(ctx context.Context, id, name string) (*Restored, error) {
	var out Restored
	return &out, c.call(ctx, "POST", snapshotsPath(id)+"/"+url.PathEscape(name)+"/restore", nil, struct{}{}, &out)
}

// DeleteSnapshot deletes snapshot name of neuron id for good.
func (c *Client) DeleteSnapshot(ctx context.Context, id, name string) error {
	return c.call(ctx, "DELETE", snapshotsPath(id)+"/"+url.PathEscape(name), nil, nil, nil)
}

func snapshotsPath(id string) string { return "/v1/neurons/" + url.PathEscape(id) + "/snapshots" }
