package ctxmount

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Record is what a running mount leaves on the host for other processes:
// `nsys-cortex umount` finds the server by it, and a launcher validates the
// mount with its token before exposing it to a neuron (seed 003 §6). It is
// written owner-only under the home directory, never in the mount.
type Record struct {
	Dir   string    `json:"dir"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
	Token string    `json:"token"`
}

// RecordPath is where the record of the mount at dir lives in mountsDir.
func RecordPath(mountsDir, dir string) string {
	name := strings.ReplaceAll(strings.Trim(filepath.Clean(dir), "/"), "/", "_")
	if name == "" {
		name = "_"
	}
	return filepath.Join(mountsDir, name+".json")
}

// WriteRecord stores r (0600, replaced atomically).
func WriteRecord(mountsDir string, r Record) error {
	if err := os.MkdirAll(mountsDir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p := RecordPath(mountsDir, r.Dir)
	tmp, err := os.CreateTemp(mountsDir, ".record-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// ReadRecord returns the record of the mount at dir.
func ReadRecord(mountsDir, dir string) (*Record, error) {
	b, err := os.ReadFile(RecordPath(mountsDir, dir))
	if err != nil {
		return nil, fmt.Errorf("no nsys-cortex mount is recorded at %s: %w", dir, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the mount record of %s: %w", dir, err)
	}
	return &r, nil
}
