package cortex

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"strconv"
)

// ReadFile returns a file's whole content.
func (n *NeuronClient) ReadFile(ctx context.Context, path string) ([]byte, error) {
	body, err := n.OpenRange(ctx, path, 0, -1)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

// Download streams a file into w and returns the bytes copied.
func (n *NeuronClient) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	body, err := n.OpenRange(ctx, path, 0, -1)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	return io.Copy(w, body)
}

// OpenRange opens length bytes of a file from offset (to the end when
// length < 0) for reading. Close it.
func (n *NeuronClient) OpenRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	req, err := n.c.request(ctx, "GET", n.prefix+"/files", url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, err
	}
	switch {
	case length == 0:
		return io.NopCloser(eofReader{}), nil
	case offset > 0 && length < 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	case length > 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
	}
	resp, err := n.c.do(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// WriteOptions shape an upload.
type WriteOptions struct {
	// Mode of a new file (default 0644; a file replaced keeps its mode).
	Mode fs.FileMode
	// Parents creates missing parent directories.
	Parents bool
	// Size, when known (≥ 0), is sent as the Content-Length, so a daemon
	// whose limit it exceeds refuses at once. -1 or 0 with a non-empty
	// reader streams without one.
	Size int64
}

// WriteFile streams r into the file at path, replacing it atomically, and
// returns the bytes written.
func (n *NeuronClient) WriteFile(ctx context.Context, path string, r io.Reader, o *WriteOptions) (int64, error) {
	q := url.Values{"path": {path}}
	if o == nil {
		o = &WriteOptions{}
	}
	if o.Mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(o.Mode.Perm()), 8))
	}
	if o.Parents {
		q.Set("parents", "true")
	}
	req, err := n.c.request(ctx, "PUT", n.prefix+"/files", q, r)
	if err != nil {
		return 0, err
	}
	if o.Size > 0 {
		req.ContentLength = o.Size
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := n.c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Bytes int64 `json:"bytes"`
	}
	if err := jsonDecode(resp.Body, &out); err != nil {
		return 0, err
	}
	return out.Bytes, nil
}

// List lists a directory.
func (n *NeuronClient) List(ctx context.Context, path string) ([]FileInfo, error) {
	var out struct {
		Entries []FileInfo `json:"entries"`
	}
	return out.Entries, n.c.call(ctx, "GET", n.prefix+"/files/list", url.Values{"path": {path}}, nil, &out)
}

// Stat describes a file, following symlinks.
func (n *NeuronClient) Stat(ctx context.Context, path string) (*FileInfo, error) {
	var fi FileInfo
	return &fi, n.c.call(ctx, "GET", n.prefix+"/files/stat", url.Values{"path": {path}}, nil, &fi)
}

// Lstat describes a file; a symlink is described itself.
func (n *NeuronClient) Lstat(ctx context.Context, path string) (*FileInfo, error) {
	var fi FileInfo
	return &fi, n.c.call(ctx, "GET", n.prefix+"/files/stat", url.Values{"path": {path}, "nofollow": {"true"}}, nil, &fi)
}

// Mkdir creates a directory and its parents; it returns the path made.
func (n *NeuronClient) Mkdir(ctx context.Context, path string) (string, error) {
	var out PathResult
	return out.Path, n.c.call(ctx, "POST", n.prefix+"/files/mkdir", nil, &MkdirRequest{Path: path}, &out)
}

// Remove removes a file (a directory tree with recursive).
func (n *NeuronClient) Remove(ctx context.Context, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return n.c.call(ctx, "DELETE", n.prefix+"/files", q, nil, nil)
}

// Move renames a file or directory.
func (n *NeuronClient) Move(ctx context.Context, r *MoveRequest) error {
	return n.c.call(ctx, "POST", n.prefix+"/files/move", nil, r, nil)
}

// Symlink creates the symbolic link path pointing at target.
func (n *NeuronClient) Symlink(ctx context.Context, target, path string) error {
	return n.c.call(ctx, "POST", n.prefix+"/files/symlink", nil, &SymlinkRequest{Path: path, Target: target}, nil)
}
