package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"sort"
	"strings"
	"sync"
)

// memFS is an in-memory FS. It can be told to fail the Nth write or removal
// (1-based, counted from when it is set), leaving half the data behind on a
// failed write as a real disk-full write might.
type memFS struct {
	mu         sync.Mutex
	files      map[string][]byte
	failWrite  int
	failRemove int
	writes     int
	removes    int
}

var _ FS = (*memFS)(nil)

var errInjected = errors.New("injected failure")

func newMemFS(files map[string]string) *memFS {
	m := &memFS{files: map[string][]byte{}}
	for p, s := range files {
		m.files[path.Clean(p)] = []byte(s)
	}
	return m
}

func (m *memFS) ReadFile(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.files[path.Clean(name)]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return append([]byte(nil), b...), nil
}

func (m *memFS) WriteFile(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	if m.writes == m.failWrite {
		m.files[path.Clean(name)] = append([]byte(nil), data[:len(data)/2]...)
		return &fs.PathError{Op: "write", Path: name, Err: errInjected}
	}
	m.files[path.Clean(name)] = append([]byte(nil), data...)
	return nil
}

func (m *memFS) Remove(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removes++
	if m.removes == m.failRemove {
		return &fs.PathError{Op: "remove", Path: name, Err: errInjected}
	}
	if _, ok := m.files[path.Clean(name)]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.files, path.Clean(name))
	return nil
}

// snapshot returns a copy of the files as strings.
func (m *memFS) snapshot() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for p, b := range m.files {
		out[p] = string(b)
	}
	return out
}

// dump renders files for a failure message.
func dump(files map[string]string) string {
	var b strings.Builder
	names := make([]string, 0, len(files))
	for n := range maps.Keys(files) {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "== %s\n%q\n", n, files[n])
	}
	return b.String()
}
