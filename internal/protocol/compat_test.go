package protocol

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"
)

// The frames in testdata/v1.N were recorded from release 1.N of the
// protocol. Every later release must still decode them: a host and an agent
// one minor version apart talk to each other. A directory is written once,
// when its release is cut (go test -run TestRecordedFrames -update-frames=v1.N),
// and never again within the major version.
var updateFrames = flag.String("update-frames", "", "write testdata/`v1.N` (only when cutting that release)")

// release is one recorded protocol version: its commands and the frames the
// encoder produced for it.
type release struct {
	dir      string
	commands []Cmd
	frames   func() map[string][]byte
}

// commands10 are the commands of release 1.0.
var commands10 = []Cmd{CmdExec, CmdFileWrite, CmdFileRead, CmdFileList, CmdStat, CmdFileExists, CmdMkdir,
	CmdResolvePath, CmdHealth, CmdShutdown, CmdPtySpawn, CmdPtyWrite, CmdPtyRead, CmdPtyResize,
	CmdPtyClose, CmdProcStart, CmdProcInput, CmdProcSignal, CmdProcList, CmdProcAttach,
	CmdFileRemove, CmdFileMove, CmdSymlink}

var releases = []release{
	{dir: "testdata/v1.0", commands: commands10, frames: sampleFrames},
	{dir: "testdata/v1.1", commands: []Cmd{CmdSearch}, frames: sampleFrames11},
	{dir: "testdata/v1.2", commands: []Cmd{CmdPortDial}, frames: sampleFrames12},
	{dir: "testdata/v1.3", commands: []Cmd{CmdFsWatch}, frames: sampleFrames13},
	{dir: "testdata/v1.4", frames: sampleFrames14},
	{dir: "testdata/v1.5", commands: []Cmd{CmdEgress, CmdAdopt}, frames: sampleFrames15},
}

func recordedFrames(dir string) map[string][]byte {
	out := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.frame"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			out[filepath.Base(f)] = b
		}
	}
	return out
}

func addFrame(frames map[string][]byte, name string, h Header, v any, body []byte) {
	if v != nil {
		h.Data, _ = json.Marshal(v)
	}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, &h, body); err != nil {
		panic(err)
	}
	frames[name+".frame"] = buf.Bytes()
}

// sampleFrames is what was recorded: one frame of each kind and command.
func sampleFrames() map[string][]byte {
	frames := map[string][]byte{}
	add := func(name string, h Header, v any, body []byte) { addFrame(frames, name, h, v, body) }
	caps := []string{}
	for _, c := range commands10 {
		caps = append(caps, string(c))
	}
	add("hello-agent", Header{Kind: KindHello}, Hello{Protocol: "1.0", Role: RoleAgent, Software: "cortex-agent 1.0.0", Caps: caps, Neuron: "demo", PID: 42, MaxBody: MaxBody, Window: DefaultWindow}, nil)
	add("hello-host", Header{Kind: KindHello}, Hello{Protocol: "1.0", Role: RoleHost, Software: "nsys-cortex", Caps: []string{}, MaxBody: MaxBody, Window: DefaultWindow}, nil)
	cmd := Command{Argv: []string{"ls", "-la"}, Cwd: "src", Env: []string{"A=1"}}
	reqs := map[Cmd]any{
		CmdExec:        ExecArgs{Command: cmd, Stdin: StdinBody, TimeoutMs: 5000, MaxOutput: 1024, Stream: true},
		CmdFileWrite:   FileWriteArgs{Path: "a.txt", Offset: 4, Mode: 0o644, Parents: true, Temp: true},
		CmdFileRead:    FileReadArgs{Path: "a.txt", Offset: 0, Length: 4096},
		CmdFileList:    FileListArgs{Path: ".", Offset: 0, Limit: 100},
		CmdStat:        StatArgs{Path: "a.txt", NoFollow: true},
		CmdFileExists:  PathArgs{Path: "a.txt"},
		CmdMkdir:       MkdirArgs{Path: "d/e", Mode: 0o755},
		CmdResolvePath: PathArgs{Path: "d/../a.txt"},
		CmdHealth:      struct{}{},
		CmdShutdown:    ShutdownArgs{GraceMs: 2000},
		CmdPtySpawn:    PtySpawnArgs{Command: Command{Argv: []string{"bash"}}, Cols: 80, Rows: 24},
		CmdPtyWrite:    ProcInputArgs{PID: 7},
		CmdPtyRead:     PtyReadArgs{PID: 7, Offset: 10, Max: 4096, WaitMs: 100},
		CmdPtyResize:   PtyResizeArgs{PID: 7, Cols: 120, Rows: 40},
		CmdPtyClose:    ProcRef{PID: 7},
		CmdProcStart:   ProcStartArgs{Command: Command{Shell: "sleep 1"}, Stdin: true, RingBytes: 65536},
		CmdProcInput:   ProcInputArgs{PID: 8, EOF: true},
		CmdProcSignal:  ProcSignalArgs{PID: 8, Signal: "TERM"},
		CmdProcList:    struct{}{},
		CmdProcAttach:  ProcAttachArgs{PID: 8, StdoutOffset: 3, StderrOffset: 0, Follow: true},
		CmdFileRemove:  RemoveArgs{Path: "d", Recursive: true},
		CmdFileMove:    MoveArgs{From: "a.txt", To: "b.txt", NoReplace: true},
		CmdSymlink:     SymlinkArgs{Path: "link", Target: "a.txt"},
	}
	for i, c := range commands10 {
		add("req-"+string(c), Header{Kind: KindRequest, ID: uint64(i + 1), Cmd: c, TimeoutMs: 30000}, reqs[c], []byte("body"))
	}
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	add("res-exec", Header{Kind: KindResponse, ID: 1}, ExecResult{ExitCode: 0, StdoutLen: 3, StderrLen: 0, DurationUs: 1200, PID: 99}, []byte("hi\n"))
	add("res-file-read", Header{Kind: KindResponse, ID: 3}, FileReadResult{N: 4, Size: 4, EOF: true}, []byte("data"))
	add("res-file-list", Header{Kind: KindResponse, ID: 4}, FileListResult{Path: "/w", Total: 1, Entries: []FileInfo{{Name: "a.txt", Type: TypeFile, Size: 4, Mode: 0o644, ModTime: t0}}}, nil)
	add("res-health", Header{Kind: KindResponse, ID: 9}, HealthResult{Version: "1.0.0", Protocol: "1.0", PID: 42, UptimeMs: 1000, RSSBytes: 4 << 20}, nil)
	add("res-proc", Header{Kind: KindResponse, ID: 16}, ProcInfo{PID: 8, Argv: []string{"sh", "-c", "sleep 1"}, Started: t0, Running: true}, nil)
	add("res-error", Header{Kind: KindResponse, ID: 2, Err: &Error{Code: CodePathEscape, Message: "path ../x is outside the neuron's root"}}, nil, nil)
	add("ev-stdout", Header{Kind: KindEvent, ID: 1, Stream: StreamStdout, Offset: 0}, nil, []byte("out"))
	add("ev-gap", Header{Kind: KindEvent, ID: 20}, GapEvent{Stream: StreamStdout, From: 0, To: 100}, nil)
	add("in-stdin", Header{Kind: KindInput, ID: 1, Stream: StreamStdin, EOF: true}, nil, []byte("in"))
	add("win", Header{Kind: KindWindow, ID: 1, Credit: 1 << 20}, nil, nil)
	add("cancel", Header{Kind: KindCancel, ID: 1}, nil, nil)
	return frames
}

// sampleFrames11 is what release 1.1 added: search, and its hello.
func sampleFrames11() map[string][]byte {
	frames := map[string][]byte{}
	caps := []string{}
	for _, c := range append(slices.Clone(commands10), CmdSearch) {
		caps = append(caps, string(c))
	}
	addFrame(frames, "hello-agent", Header{Kind: KindHello}, Hello{Protocol: "1.1", Role: RoleAgent, Software: "cortex-agent 1.1.0", Caps: caps, Neuron: "demo", PID: 42, MaxBody: MaxBody, Window: DefaultWindow}, nil)
	addFrame(frames, "req-search", Header{Kind: KindRequest, ID: 24, Cmd: CmdSearch, TimeoutMs: 30000},
		SearchArgs{Path: "src", Pattern: "func \\w+", Mode: SearchModeContent, Glob: []string{"**/*.go", "!vendor"}, Type: "go",
			IgnoreCase: true, Context: 2, MaxResults: 100, MaxLineChars: 200, Hidden: true, NoIgnore: true, MaxFileBytes: 1 << 20}, nil)
	addFrame(frames, "res-search", Header{Kind: KindResponse, ID: 24}, SearchResult{
		Matches: []SearchMatch{{Path: "a.go", Line: 3, Text: "func main() {"}, {Path: "a.go", Line: 4, Text: "}", Context: true}},
		Files:   []string{"a.go"}, Counts: []SearchCount{{Path: "a.go", Count: 1}}, Truncated: true, FilesScanned: 7, SkippedBinary: 1}, nil)
	return frames
}

// sampleFrames12 is what release 1.2 added: port_dial (its request, its
// connected event, its data both ways, its result), and the agent's
// proof in its hello.
func sampleFrames12() map[string][]byte {
	frames := map[string][]byte{}
	caps := []string{}
	for _, c := range append(slices.Clone(commands10), CmdSearch, CmdPortDial) {
		caps = append(caps, string(c))
	}
	addFrame(frames, "hello-agent", Header{Kind: KindHello}, Hello{Protocol: "1.2", Role: RoleAgent, Software: "cortex-agent 1.2.0", Caps: caps,
		Neuron: "demo", PID: 42, Proof: "3q2+7w==", MaxBody: MaxBody, Window: DefaultWindow}, nil)
	addFrame(frames, "req-port_dial", Header{Kind: KindRequest, ID: 31, Cmd: CmdPortDial}, PortDialArgs{Port: 8000}, nil)
	addFrame(frames, "event-connected", Header{Kind: KindEvent, ID: 31, Stream: StreamConnected}, nil, nil)
	addFrame(frames, "input-port", Header{Kind: KindInput, ID: 31, Stream: StreamStdin}, nil, []byte("GET / HTTP/1.1\r\n\r\n"))
	addFrame(frames, "event-port", Header{Kind: KindEvent, ID: 31, Stream: StreamStdout}, nil, []byte("HTTP/1.1 200 OK\r\n"))
	addFrame(frames, "res-port_dial", Header{Kind: KindResponse, ID: 31}, PortDialResult{Sent: 18, Received: 17}, nil)
	return frames
}

// sampleFrames13 is what release 1.3 added: fs_watch (its request, its
// ready and change events, its end).
func sampleFrames13() map[string][]byte {
	frames := map[string][]byte{}
	caps := []string{}
	for _, c := range append(slices.Clone(commands10), CmdSearch, CmdPortDial, CmdFsWatch) {
		caps = append(caps, string(c))
	}
	addFrame(frames, "hello-agent", Header{Kind: KindHello}, Hello{Protocol: "1.3", Role: RoleAgent, Software: "cortex-agent 1.3.0", Caps: caps,
		Neuron: "demo", PID: 42, Proof: "3q2+7w==", MaxBody: MaxBody, Window: DefaultWindow}, nil)
	addFrame(frames, "req-fs_watch", Header{Kind: KindRequest, ID: 40, Cmd: CmdFsWatch}, FsWatchArgs{Path: "src", Recursive: true}, nil)
	addFrame(frames, "event-ready", Header{Kind: KindEvent, ID: 40, Stream: StreamReady}, struct{}{}, nil)
	addFrame(frames, "event-fs", Header{Kind: KindEvent, ID: 40, Stream: StreamFs}, FsEvent{Name: "pkg/a.go", Op: FsWrite}, nil)
	addFrame(frames, "res-fs_watch", Header{Kind: KindResponse, ID: 40}, struct{}{}, nil)
	return frames
}

// sampleFrames14 is what release 1.4 added: passed files (the agent's
// pass_files cap, the requests that ask for a file, an answer that
// carries one; the descriptor itself travels beside the bytes).
func sampleFrames14() map[string][]byte {
	frames := map[string][]byte{}
	caps := []string{}
	for _, c := range append(slices.Clone(commands10), CmdSearch, CmdPortDial, CmdFsWatch) {
		caps = append(caps, string(c))
	}
	addFrame(frames, "hello-agent", Header{Kind: KindHello}, Hello{Protocol: "1.4", Role: RoleAgent, Software: "cortex-agent 1.4.0", Caps: append(caps, CapPassFiles),
		Neuron: "demo", PID: 42, Proof: "3q2+7w==", MaxBody: MaxBody, Window: DefaultWindow}, nil)
	addFrame(frames, "req-file_write-pass", Header{Kind: KindRequest, ID: 50, Cmd: CmdFileWrite, TimeoutMs: 30000},
		FileWriteArgs{Path: ".big.cortex-0a1b2c3d4e5f", Mode: 0o644, Temp: true, PassFile: true}, nil)
	addFrame(frames, "res-file_write-pass", Header{Kind: KindResponse, ID: 50, File: true}, FileWriteResult{Ino: 1234}, nil)
	addFrame(frames, "req-file_read-pass", Header{Kind: KindRequest, ID: 51, Cmd: CmdFileRead, TimeoutMs: 30000},
		FileReadArgs{Path: "big", PassFile: true}, nil)
	addFrame(frames, "res-file_read-pass", Header{Kind: KindResponse, ID: 51, File: true}, FileReadResult{Size: 64 << 20}, nil)
	return frames
}

// sampleFrames15 is what release 1.5 added: egress_tunnel (its request,
// the agent's connected event, tunnel bytes each way, its end), and adopt.
func sampleFrames15() map[string][]byte {
	frames := map[string][]byte{}
	addFrame(frames, "req-egress_tunnel", Header{Kind: KindRequest, ID: 60, Cmd: CmdEgress}, struct{}{}, nil)
	addFrame(frames, "event-connected", Header{Kind: KindEvent, ID: 60, Stream: StreamConnected}, struct{}{}, nil)
	addFrame(frames, "event-hello", Header{Kind: KindEvent, ID: 60, Stream: StreamStdout}, nil, []byte("nsys-cortex egress hello v1 0123456789abcdef\n"))
	addFrame(frames, "input-ready", Header{Kind: KindInput, ID: 60, Stream: StreamStdin}, nil, []byte("nsys-cortex egress ready v1 0123456789abcdef\n"))
	addFrame(frames, "res-egress_tunnel", Header{Kind: KindResponse, ID: 60}, EgressResult{Sent: 45, Received: 45}, nil)
	addFrame(frames, "res-egress_tunnel-held", Header{Kind: KindResponse, ID: 61,
		Err: &Error{Code: CodeBadRequest, Message: "another host holds this neuron's egress tunnel (one at a time)"}}, nil, nil)
	addFrame(frames, "req-adopt", Header{Kind: KindRequest, ID: 62, Cmd: CmdAdopt, TimeoutMs: 30000}, AdoptArgs{Neuron: "web-1", Env: []string{"FOO=bar"}}, nil)
	addFrame(frames, "res-adopt", Header{Kind: KindResponse, ID: 62}, struct{}{}, nil)
	return frames
}

// argsFor returns a pointer to the typed arguments of cmd.
func argsFor(c Cmd) any {
	switch c {
	case CmdExec:
		return &ExecArgs{}
	case CmdFileWrite:
		return &FileWriteArgs{}
	case CmdFileRead:
		return &FileReadArgs{}
	case CmdFileList:
		return &FileListArgs{}
	case CmdStat:
		return &StatArgs{}
	case CmdMkdir:
		return &MkdirArgs{}
	case CmdShutdown:
		return &ShutdownArgs{}
	case CmdPtySpawn:
		return &PtySpawnArgs{}
	case CmdPtyWrite, CmdProcInput:
		return &ProcInputArgs{}
	case CmdPtyRead:
		return &PtyReadArgs{}
	case CmdPtyResize:
		return &PtyResizeArgs{}
	case CmdPtyClose:
		return &ProcRef{}
	case CmdProcStart:
		return &ProcStartArgs{}
	case CmdProcSignal:
		return &ProcSignalArgs{}
	case CmdProcAttach:
		return &ProcAttachArgs{}
	case CmdFileRemove:
		return &RemoveArgs{}
	case CmdFileMove:
		return &MoveArgs{}
	case CmdSymlink:
		return &SymlinkArgs{}
	case CmdSearch:
		return &SearchArgs{}
	case CmdPortDial:
		return &PortDialArgs{}
	case CmdFsWatch:
		return &FsWatchArgs{}
	case CmdAdopt:
		return &AdoptArgs{}
	}
	return &PathArgs{}
}

func TestRecordedFrames(t *testing.T) {
	if *updateFrames != "" {
		for _, r := range releases {
			if filepath.Base(r.dir) != *updateFrames {
				continue
			}
			os.MkdirAll(r.dir, 0o755)
			for name, b := range r.frames() {
				if err := os.WriteFile(filepath.Join(r.dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return
		}
		t.Fatalf("no release %q", *updateFrames)
	}
	seen := map[Cmd]bool{}
	for _, r := range releases {
		t.Run(filepath.Base(r.dir), func(t *testing.T) {
			recorded := recordedFrames(r.dir)
			if len(recorded) < len(r.commands)+2 {
				t.Fatalf("only %d recorded frames in %s", len(recorded), r.dir)
			}
			checkRecorded(t, recorded, seen)
			// The recording is of this release: the encoder still produces it
			// byte for byte, so nothing changed the wire format by accident.
			for name, b := range r.frames() {
				if rec, ok := recorded[name]; !ok {
					t.Errorf("%s: not recorded in %s", name, r.dir)
				} else if !bytes.Equal(rec, b) {
					t.Errorf("%s: the encoder's output changed from the recorded frame:\n%q\n%q", name, rec, b)
				}
			}
		})
	}
	// Every command of this version has a recorded request in its release.
	for _, c := range Commands() {
		if !seen[c] {
			t.Errorf("no recorded request for %s", c)
		}
	}
}

// checkRecorded decodes every recorded frame, noting the commands of its requests in seen.
func checkRecorded(t *testing.T, recorded map[string][]byte, seen map[Cmd]bool) {
	t.Helper()
	names := make([]string, 0, len(recorded))
	for n := range recorded {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		f, err := NewReader(bytes.NewReader(recorded[name]), 0).Read()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch f.Kind {
		case KindHello:
			var h Hello
			if err := json.Unmarshal(f.Data, &h); err != nil || h.Protocol == "" {
				t.Fatalf("%s: %v %+v", name, err, h)
			}
		case KindRequest:
			seen[f.Cmd] = true
			if err := json.Unmarshal(f.Data, argsFor(f.Cmd)); err != nil {
				t.Fatalf("%s: arguments of %s do not decode: %v", name, f.Cmd, err)
			}
		case KindResponse:
			if f.Err != nil {
				if _, ok := ParseCode(string(f.Err.Code)); !ok {
					t.Fatalf("%s: code %q", name, f.Err.Code)
				}
			}
		}
	}
}
