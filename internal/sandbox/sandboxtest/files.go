package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"path"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

func testFiles(t *testing.T, f *fixture) {
	m, c := f.running("fs")
	st, err := m.Get(f.ctx, "fs")
	if err != nil {
		t.Fatal(err)
	}
	ctx := f.ctx
	t.Run("SmallRoundTrip", func(t *testing.T) {
		if err := c.WriteFile(ctx, "notes/a.txt", []byte("alpha\n"), &link.WriteOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadFile(ctx, "notes/a.txt")
		if err != nil || string(got) != "alpha\n" {
			t.Fatalf("%q %v", got, err)
		}
		// An absolute path is the path inside the neuron: the workdir's own.
		got, err = c.ReadFile(ctx, path.Join(st.Workdir, "notes/a.txt"))
		if err != nil || string(got) != "alpha\n" {
			t.Fatalf("absolute: %q %v", got, err)
		}
		// Commands see the same file.
		res, err := c.Exec(ctx, &link.ExecRequest{Command: sh("cat notes/a.txt")})
		if err != nil || string(res.Stdout) != "alpha\n" {
			t.Fatalf("exec cat: %q %v", res.Stdout, err)
		}
		if err := c.WriteFile(ctx, "empty", nil, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := c.ReadFile(ctx, "empty"); err != nil || len(got) != 0 {
			t.Fatalf("empty: %q %v", got, err)
		}
	})
	t.Run("LargeRoundTrip", func(t *testing.T) {
		big := make([]byte, 3*protocol.ChunkSize+12345)
		rand.Read(big)
		if err := c.WriteFile(ctx, "big.bin", big, nil); err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadFile(ctx, "big.bin")
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("read back %d bytes (want %d): %v", len(got), len(big), err)
		}
		var buf bytes.Buffer
		n, err := c.ReadFileTo(ctx, "big.bin", &buf)
		if err != nil || n != int64(len(big)) || !bytes.Equal(buf.Bytes(), big) {
			t.Fatalf("ReadFileTo: %d %v", n, err)
		}
		n, err = c.WriteFileFrom(ctx, "big2.bin", bytes.NewReader(big), nil)
		if err != nil || n != int64(len(big)) {
			t.Fatalf("WriteFileFrom: %d %v", n, err)
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: sh("sha256sum big2.bin | cut -c1-64")})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != sha256hex(big) {
			t.Fatalf("hash inside: %q %v", res.Stdout, err)
		}
		// No temporary files are left beside the target.
		entries, err := c.List(ctx, ".")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.Contains(e.Name, ".cortex-") {
				t.Fatalf("leftover temporary file %s", e.Name)
			}
		}
	})
	t.Run("Metadata", func(t *testing.T) {
		if _, err := c.Mkdir(ctx, "d1/d2/d3"); err != nil {
			t.Fatal(err)
		}
		if err := c.WriteFile(ctx, "d1/f", []byte("12345"), &link.WriteOptions{Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
		fi, err := c.Stat(ctx, "d1/f")
		if err != nil || fi.Type != protocol.TypeFile || fi.Size != 5 || fi.Mode != 0o600 || fi.Path != path.Join(st.Workdir, "d1/f") {
			t.Fatalf("stat: %+v %v", fi, err)
		}
		entries, err := c.List(ctx, "d1")
		if err != nil || len(entries) != 2 || entries[0].Name != "d2" || entries[0].Type != protocol.TypeDir || entries[1].Name != "f" {
			t.Fatalf("list: %+v %v", entries, err)
		}
		for p, want := range map[string]bool{"d1/f": true, "d1/d2": true, "d1/nope": false} {
			if ok, err := c.Exists(ctx, p); err != nil || ok != want {
				t.Fatalf("exists %s: %v %v", p, ok, err)
			}
		}
		r, err := c.Resolve(ctx, "d1/d2/../f")
		if err != nil || r.Path != path.Join(st.Workdir, "d1/f") || !r.Exists {
			t.Fatalf("resolve: %+v %v", r, err)
		}
		if err := c.Move(ctx, &protocol.MoveArgs{From: "d1/f", To: "d1/d2/g"}); err != nil {
			t.Fatal(err)
		}
		if got, err := c.ReadFile(ctx, "d1/d2/g"); err != nil || string(got) != "12345" {
			t.Fatalf("after move: %q %v", got, err)
		}
		if err := c.Remove(ctx, "d1", false); !protocol.HasCode(err, protocol.CodeBadRequest) {
			t.Fatalf("remove non-empty dir: %v, want BAD_REQUEST", err)
		}
		if err := c.Remove(ctx, "d1", true); err != nil {
			t.Fatal(err)
		}
		if ok, _ := c.Exists(ctx, "d1"); ok {
			t.Fatal("d1 survived a recursive remove")
		}
		if err := c.Remove(ctx, ".", true); !protocol.HasCode(err, protocol.CodeBadRequest) {
			t.Fatalf("remove the workdir: %v, want BAD_REQUEST", err)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		checks := []struct {
			name string
			err  func() error
			code protocol.Code
		}{
			{"read missing", func() error { _, err := c.ReadFile(ctx, "missing"); return err }, protocol.CodeNotFound},
			{"stat missing", func() error { _, err := c.Stat(ctx, "missing"); return err }, protocol.CodeNotFound},
			{"list a file", func() error {
				c.WriteFile(ctx, "plain", []byte("x"), nil)
				_, err := c.List(ctx, "plain")
				return err
			}, protocol.CodeBadRequest},
			{"read a dir", func() error { c.Mkdir(ctx, "adir"); _, err := c.ReadFile(ctx, "adir"); return err }, protocol.CodeBadRequest},
			{"write over a dir", func() error { return c.WriteFile(ctx, "adir", []byte("x"), nil) }, protocol.CodeBadRequest},
			{"move missing", func() error { return c.Move(ctx, &protocol.MoveArgs{From: "missing", To: "x"}) }, protocol.CodeNotFound},
			{"remove missing", func() error { return c.Remove(ctx, "missing", true) }, protocol.CodeNotFound},
			{"write without parent", func() error { return c.WriteFile(ctx, "no/parent/file", []byte("x"), nil) }, protocol.CodeNotFound},
			{"empty path", func() error { _, err := c.Stat(ctx, ""); return err }, protocol.CodeBadRequest},
		}
		for _, ck := range checks {
			if err := ck.err(); !protocol.HasCode(err, ck.code) {
				t.Errorf("%s: %v, want %s", ck.name, err, ck.code)
			}
		}
	})
	if !f.cfg.Confined {
		return
	}
	t.Run("PathEscape", func(t *testing.T) {
		// Plant a file just outside the workdir and try every way out.
		if _, err := c.Exec(ctx, &link.ExecRequest{Command: sh("echo secret > ../outside.txt; ln -sf ../outside.txt rel-link; ln -sf /etc/passwd abs-link; mkdir -p inner; ln -sfn .. inner/up")}); err != nil {
			t.Fatal(err)
		}
		escapes := []func() error{
			func() error { _, err := c.ReadFile(ctx, "../outside.txt"); return err },
			func() error { _, err := c.ReadFile(ctx, "inner/../../outside.txt"); return err },
			func() error { _, err := c.ReadFile(ctx, "/etc/passwd"); return err },
			func() error { _, err := c.ReadFile(ctx, "rel-link"); return err },
			func() error { _, err := c.ReadFile(ctx, "abs-link"); return err },
			func() error { _, err := c.ReadFile(ctx, "inner/up/../outside.txt"); return err },
			func() error { return c.WriteFile(ctx, "../written-outside", []byte("x"), nil) },
			func() error { return c.WriteFile(ctx, "rel-link", []byte("x"), nil) },
			func() error { _, err := c.List(ctx, ".."); return err },
			func() error { _, err := c.Stat(ctx, "rel-link"); return err },
			func() error { return c.Move(ctx, &protocol.MoveArgs{From: "rel-link", To: "../moved"}) },
			func() error { return c.Remove(ctx, "../outside.txt", false) },
			func() error { _, err := c.Mkdir(ctx, "../newdir"); return err },
			func() error { _, err := c.Resolve(ctx, "rel-link"); return err },
			func() error {
				_, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"pwd"}, Cwd: ".."}})
				return err
			},
		}
		for i, op := range escapes {
			if err := op(); !protocol.HasCode(err, protocol.CodePathEscape) {
				t.Errorf("escape %d: %v, want PATH_ESCAPE", i, err)
			}
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: sh("cat ../outside.txt; ls ..")})
		if err != nil || !strings.Contains(string(res.Stdout), "secret") || strings.Contains(string(res.Stdout), "written-outside") {
			t.Fatalf("the planted file changed or something was written outside: %q %v", res.Stdout, err)
		}
	})
}
