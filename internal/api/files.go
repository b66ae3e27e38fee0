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

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	fi, err := c.Stat(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if fi.Type == protocol.TypeDir {
		writeError(w, badRequest("%s is a directory: list it with GET .../files/list?path=%s", p, p))
		return
	}
	if fi.Type != protocol.TypeFile {
		// A FIFO or a device could block the read forever.
		writeError(w, badRequest("%s is a %s, not a regular file: only files are downloaded", p, fi.Type))
		return
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
			writeError(w, cortex.APIError{Code: cortex.CodeRangeNotSatisfiable, Message: fmt.Sprintf("range %q starts past the end of the file (%d bytes)", rg, fi.Size)})
			return
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
		s.fail(w, r, err)
		return
	}
	if n >= 0 {
		h.Set("Content-Length", strconv.FormatInt(n, 10))
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
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

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	parents, err := boolParam(r, "parents")
	if err != nil {
		writeError(w, err)
		return
	}
	opts := &link.WriteOptions{Parents: parents}
	if m := r.URL.Query().Get("mode"); m != "" {
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil || mode > 0o777 {
			writeError(w, badRequest("query parameter mode=%q: give permission bits in octal, e.g. 644 or 755", m))
			return
		}
		opts.Mode = fs.FileMode(mode)
	}
	if r.ContentLength > s.opts.MaxUpload {
		// Refused before a byte of the body is read.
		writeError(w, cortex.APIError{Code: cortex.CodeTooLarge, Message: fmt.Sprintf(
			"the upload is %d bytes; this daemon takes files up to %d bytes (api.max_upload)", r.ContentLength, s.opts.MaxUpload)})
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxUpload)
	n, err := c.WriteFileFrom(r.Context(), p, body, opts)
	s.metrics.bytes.WithLabelValues("upload").Add(float64(n))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}{p, n})
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	recursive, err := boolParam(r, "recursive")
	if err != nil {
		writeError(w, err)
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	if err := c.Remove(r.Context(), p, recursive); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	list, err := c.List(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if list == nil {
		list = []protocol.FileInfo{}
	}
	writeJSON(w, http.StatusOK, struct {
		Entries []protocol.FileInfo `json:"entries"`
	}{list})
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	noFollow, err := boolParam(r, "nofollow")
	if err != nil {
		writeError(w, err)
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	stat := c.Stat
	if noFollow {
		stat = c.Lstat
	}
	fi, err := stat(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	var req cortex.MkdirRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Path == "" {
		writeError(w, badRequest("path: name the directory to create"))
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	p, err := c.Mkdir(r.Context(), req.Path)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cortex.PathResult{Path: p})
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) {
	var req cortex.MoveRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.From == "" || req.To == "" {
		writeError(w, badRequest("from and to: give both paths"))
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	if err := c.Move(r.Context(), &protocol.MoveArgs{From: req.From, To: req.To, NoReplace: req.NoReplace, Parents: req.Parents}); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) symlink(w http.ResponseWriter, r *http.Request) {
	var req cortex.SymlinkRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Path == "" || req.Target == "" {
		writeError(w, badRequest("path and target: give both"))
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	if err := c.Symlink(r.Context(), req.Target, req.Path); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
