package api

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// pathParam reads the required ?path= parameter.
func pathParam(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", badRequest("query parameter path is missing: give the file's path in the neuron, e.g. ?path=/home/agent/workspace/x")
	}
	return p, nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	p, err := pathParam(r)
	if err != nil {
		return nil, err
	}
	return func(c *link.Client) (int, any, error) {
		fi, err := c.Stat(r.Context(), p)
		if err != nil {
			return 0, nil, err
		}
		return 0, nil, s.download(w, r, c, p, fi)
	}, nil
}

// download answers file p (fi) of the neuron, or the range of it asked:
// an error before the status is sent is returned; one after it cuts the
// response.
func (s *Server) download(w http.ResponseWriter, r *http.Request, c *link.Client, p string, fi *protocol.FileInfo) error {
	if fi.Type == protocol.TypeDir {
		return badRequest("%s is a directory: list it with GET .../files/list?path=%s", p, p)
	}
	if fi.Type != protocol.TypeFile {
		// A FIFO or a device could block the read forever.
		return badRequest("%s is a %s, not a regular file: only files are downloaded", p, fi.Type)
	}
	off, n, status := int64(0), fi.Size, http.StatusOK
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Last-Modified", fi.ModTime.UTC().Format(http.TimeFormat))
	if rg := r.Header.Get("Range"); rg != "" && fi.Size > 0 {
		// One range of bytes is served; several ranges, or another unit,
		// are ignored (the whole file, 200), as HTTP allows.
		switch o, k, res := parseRange(rg, fi.Size); res {
		case rangeOK:
			off, n, status = o, k, http.StatusPartialContent
			h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, fi.Size))
		case rangeUnsatisfiable:
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", fi.Size))
			return cortex.APIError{Code: cortex.CodeRangeNotSatisfiable, Message: fmt.Sprintf("range %q starts past the end of the file (%d bytes)", rg, fi.Size)}
		}
	}
	if fi.Size == 0 {
		n = -1 // a device, or a /proc file that says 0: read to the end
	}
	// The first piece is read before the status is sent, so that a file
	// that can be stat'ed but not read (permissions) is a plain error.
	var first bytes.Buffer
	probe := int64(firstPiece)
	if n >= 0 {
		probe = min(n, probe)
	}
	if _, err := c.ReadRangeTo(r.Context(), p, off, probe, &first); err != nil {
		h.Del("Content-Range")
		return err
	}
	if n >= 0 {
		h.Set("Content-Length", strconv.FormatInt(n, 10))
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	copied, err := io.Copy(w, &first)
	if err == nil && (n < 0 && copied == probe || n > copied) {
		var more int64
		rest := int64(-1)
		if n >= 0 {
			rest = n - copied
		}
		more, err = c.ReadRangeTo(r.Context(), p, off+copied, rest, w)
		copied += more
	}
	s.metrics.bytes.WithLabelValues("download").Add(float64(copied))
	if err != nil {
		s.noteFailure(r, err)
		panic(http.ErrAbortHandler) // the status is sent: cut the response so the client sees it is short
	}
	return nil
}

// firstPiece is how much of a download is read before its status is sent.
const firstPiece = 64 << 10

// Results of parseRange.
const (
	rangeIgnored = iota
	rangeOK
	rangeUnsatisfiable
)

// parseRange reads one "bytes=a-b", "bytes=a-" or "bytes=-n" range of a
// file of size bytes (> 0).
func parseRange(h string, size int64) (off, n int64, result int) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, rangeIgnored
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, rangeIgnored
	}
	if a == "" { // the last b bytes
		last, err := strconv.ParseInt(b, 10, 64)
		if err != nil || last < 0 {
			return 0, 0, rangeIgnored
		}
		if last == 0 {
			return 0, 0, rangeUnsatisfiable
		}
		last = min(last, size)
		return size - last, last, rangeOK
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, rangeIgnored
	}
	end := size - 1
	if b != "" {
		if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
			return 0, 0, rangeIgnored
		}
		end = min(end, size-1)
	}
	if start >= size {
		return 0, 0, rangeUnsatisfiable
	}
	return start, end - start + 1, rangeOK
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	p, err := pathParam(r)
	if err != nil {
		return nil, err
	}
	parents, err := boolParam(r, "parents")
	if err != nil {
		return nil, err
	}
	opts := &link.WriteOptions{Parents: parents}
	if m := r.URL.Query().Get("mode"); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil || mode > 0o777 {
			return nil, badRequest("query parameter mode=%q: give permission bits in octal, e.g. 644 or 755", m)
		}
		opts.Mode = fs.FileMode(mode)
	}
	if r.ContentLength > s.opts.MaxUpload {
		// Refused before a byte of the body is read.
		return nil, cortex.APIError{Code: cortex.CodeTooLarge, Message: fmt.Sprintf(
			"the upload is %d bytes; this daemon takes files up to %d bytes (api.max_upload)", r.ContentLength, s.opts.MaxUpload)}
	}
	return func(c *link.Client) (int, any, error) {
		body := http.MaxBytesReader(w, r.Body, s.opts.MaxUpload)
		n, err := c.WriteFileFrom(r.Context(), p, body, opts)
		s.metrics.bytes.WithLabelValues("upload").Add(float64(n))
		return http.StatusOK, struct {
			Path  string `json:"path"`
			Bytes int64  `json:"bytes"`
		}{p, n}, err
	}, nil
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	p, err := pathParam(r)
	if err != nil {
		return nil, err
	}
	recursive, err := boolParam(r, "recursive")
	if err != nil {
		return nil, err
	}
	return func(c *link.Client) (int, any, error) {
		return http.StatusNoContent, nil, c.Remove(r.Context(), p, recursive)
	}, nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	p, err := pathParam(r)
	if err != nil {
		return nil, err
	}
	return func(c *link.Client) (int, any, error) {
		list, err := c.List(r.Context(), p)
		if list == nil {
			list = []protocol.FileInfo{}
		}
		return http.StatusOK, struct {
			Entries []protocol.FileInfo `json:"entries"`
		}{list}, err
	}, nil
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	p, err := pathParam(r)
	if err != nil {
		return nil, err
	}
	noFollow, err := boolParam(r, "nofollow")
	if err != nil {
		return nil, err
	}
	return func(c *link.Client) (int, any, error) {
		stat := c.Stat
		if noFollow {
			stat = c.Lstat
		}
		fi, err := stat(r.Context(), p)
		return http.StatusOK, fi, err
	}, nil
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	var req cortex.MkdirRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return nil, err
	}
	if req.Path == "" {
		return nil, badRequest("path: name the directory to create")
	}
	return func(c *link.Client) (int, any, error) {
		p, err := c.Mkdir(r.Context(), req.Path)
		return http.StatusOK, cortex.PathResult{Path: p}, err
	}, nil
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	var req cortex.MoveRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return nil, err
	}
	if req.From == "" || req.To == "" {
		return nil, badRequest("from and to: give both paths")
	}
	return func(c *link.Client) (int, any, error) {
		return http.StatusNoContent, nil, c.Move(r.Context(), &protocol.MoveArgs{From: req.From, To: req.To, NoReplace: req.NoReplace, Parents: req.Parents})
	}, nil
}

func (s *Server) symlink(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	var req cortex.SymlinkRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return nil, err
	}
	if req.Path == "" || req.Target == "" {
		return nil, badRequest("path and target: give both")
	}
	return func(c *link.Client) (int, any, error) {
		return http.StatusNoContent, nil, c.Symlink(r.Context(), req.Target, req.Path)
	}, nil
}
