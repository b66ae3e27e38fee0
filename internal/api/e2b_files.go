package api

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/link"
)

// envd's HTTP file routes: GET /files?path= downloads a file, POST
// /files?path= uploads one (a body of octet-stream) or several (a
// multipart form, one part a file, its name the path when no path is
// given). "username" is accepted and must name the neuron's user.

// e2bEntry is what an upload answers per file.
type e2bEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// envdFileClient checks username and the gate, and returns the channel.
func (s *Server) envdFileClient(w http.ResponseWriter, r *http.Request, action gate.Action) (*link.Client, bool) {
	if u := r.URL.Query().Get("username"); u != "" && u != "user" {
		writeE2BError(w, http.StatusBadRequest, "username %q: a Cortex sandbox has one user, \"user\" (docs/e2b.md)", u)
		return nil, false
	}
	id := envdSandbox(r.Context())
	if err := s.allow(r.Context(), id, action, r.Method+" envd /files"); err != nil {
		writeE2BFailure(w, err)
		return nil, false
	}
	c, err := s.client(r.Context(), id)
	if err != nil {
		writeE2BFailure(w, err)
		return nil, false
	}
	return c, true
}

// writeE2BFailure writes err in E2B's shape, with the status of its class.
func writeE2BFailure(w http.ResponseWriter, err error) {
	ae := apiError(err)
	status := ae.Code.HTTPStatus()
	if status == 0 {
		status = http.StatusInternalServerError
	}
	writeE2BError(w, status, "%s", ae.Message)
}

func (s *Server) envdDownload(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeE2BError(w, http.StatusBadRequest, "query parameter path is required")
		return
	}
	c, ok := s.envdFileClient(w, r, gate.FileRead)
	if !ok {
		return
	}
	fi, err := c.Stat(r.Context(), p)
	if err == nil {
		// The native download's: regular files only (a FIFO could hold
		// the read forever), ranges, its length from the stat.
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
		err = s.download(w, r, c, p, fi)
	}
	if err != nil {
		w.Header().Del("Content-Disposition")
		writeE2BFailure(w, err)
	}
}

func (s *Server) envdUpload(w http.ResponseWriter, r *http.Request) {
	c, ok := s.envdFileClient(w, r, gate.FileWrite)
	if !ok {
		return
	}
	if r.ContentLength > s.opts.MaxUpload {
		writeE2BError(w, http.StatusRequestEntityTooLarge, "the upload is %d bytes; this Cortex takes up to %d (api.max_upload)", r.ContentLength, s.opts.MaxUpload)
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxUpload)
	target := r.URL.Query().Get("path")
	signedPath, signed := r.Context().Value(signedPathKey{}).(string)
	if signed && signedPath == "" {
		writeE2BError(w, http.StatusBadRequest, "a signed upload URL writes the one file its path names, and this one names none")
		return
	}
	var out []e2bEntry
	put := func(p string, src io.Reader) error {
		if p == "" {
			return badRequest("no path: give ?path= or the part's filename")
		}
		if signed && (p != signedPath || len(out) > 0) {
			return badRequest("a signed upload URL writes the one file its path names (%s), not %s", signedPath, p)
		}
		n, err := c.WriteFileFrom(r.Context(), p, src, &link.WriteOptions{Parents: true})
		s.metrics.bytes.WithLabelValues("upload").Add(float64(n))
		if err != nil {
			return err
		}
		out = append(out, e2bEntry{Name: path.Base(p), Type: "file", Path: p})
		return nil
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var src io.Reader = body
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		if mt == "multipart/form-data" {
			writeE2BError(w, http.StatusBadRequest, "a gzip body is taken as octet-stream only")
			return
		}
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeE2BError(w, http.StatusBadRequest, "the gzip body: %v", err)
			return
		}
		defer zr.Close()
		// The file written is bounded as an upload is, not by its
		// compressed size.
		src, mt = &capReader{r: zr, left: s.opts.MaxUpload}, ""
	default:
		writeE2BError(w, http.StatusUnsupportedMediaType, "Content-Encoding %q: send gzip or none", enc)
		return
	}
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeE2BError(w, http.StatusBadRequest, "the multipart body: %v", err)
				return
			}
			// The query's path names the first file; the others (and
			// the first, without one) are named by their filename.
			// The filename is the path (FileName would keep its base only).
			_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p := cd["filename"]
			if target != "" && len(out) == 0 {
				p = target
			}
			if err := put(p, part); err != nil {
				writeE2BFailure(w, err)
				return
			}
		}
	} else if err := put(target, src); err != nil {
		writeE2BFailure(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// capReader fails a read past its cap (a decompressed body's bound).
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("the upload decompresses to more than api.max_upload allows")
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
