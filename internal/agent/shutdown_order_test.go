//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// TestShutdownClosesConnsBeforeKill: on shutdown (Run's ctx cancelled),
// every session's connection is gone before the agent ends its
// processes, so a followed terminal never answers that its process ended
// (what a host would take for a clean end while the agent died). The
// order before ee68cc3 answered 143 (SIGTERM) here.
func TestShutdownClosesConnsBeforeKill(t *testing.T) {
	root := t.TempDir()
	ch := t.TempDir()
	a, err := New(Config{ID: "ord", Root: root, ChannelDir: ch, Version: "test", Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	hostEnd, agentEnd := socketPair(t)
	defer hostEnd.Close()
	sdone := make(chan error, 1)
	go func() { sdone <- a.ServeConn(context.Background(), agentEnd) }()
	h := &rawHost{t: t, conn: hostEnd, r: protocol.NewReader(hostEnd, 0), nonce: protocol.NewNonce()}
	h.hello()
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 1, Cmd: protocol.CmdPtySpawn}, protocol.PtySpawnArgs{Command: protocol.Command{Argv: []string{"sleep", "60"}}}, nil)
	f := h.read()
	var info protocol.ProcInfo
	if f.Err != nil || json.Unmarshal(f.Data, &info) != nil || info.PID == 0 {
		t.Fatalf("spawn: %+v", f.Header)
	}
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 2, Cmd: protocol.CmdPtyRead}, protocol.PtyReadArgs{PID: info.PID, Follow: true}, nil)
	waittest.For(t, 5*time.Second, "the follow to be under way", func() bool { return a.commands.Load() >= 2 })
	cancel()
	hostEnd.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := h.r.Read()
		if err != nil {
			t.Logf("host saw the connection end: %v", err)
			break
		}
		if f.Kind == protocol.KindResponse && f.ID == 2 {
			if f.Err == nil || f.Err.Code != protocol.CodeNotRunning {
				t.Fatalf("the follow answered %s (err %v) after the agent stopped, want NOT_RUNNING or a hang-up", f.Data, f.Err)
			}
			break
		}
	}
	hostEnd.Close()
	<-sdone
	<-runDone
}
