package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// statsEvery is how often stats refreshes on a terminal; statsSnapshot is
// the interval between the two readings a snapshot takes for CPU %.
const (
	statsEvery    = time.Second
	statsSnapshot = 500 * time.Millisecond
)

// statsRow is one neuron's line of stats: its metrics and the CPU share
// between two readings (100 is one core).
type statsRow struct {
	sandbox.Metrics
	CPUPercent float64 `json:"cpuPercent"`
}

func (a *App) statsCommand() *cobra.Command {
	var out outputFlags
	var noStream, all bool
	cmd := &cobra.Command{
		Use:   "stats [ID...]",
		Short: "Show neurons' use of CPU, memory, processes, disk and egress",
		Long: `stats shows, like docker stats, each neuron's CPU (100% is one core, over
the last interval), memory now / ceiling and its peak, processes, the
bytes its data takes on disk, egress (bytes and connections through its
proxy; "-" without egress) and uptime. Without ids: the running and paused
neurons (-a: the stopped too). On a terminal the table is redrawn every
second until interrupted; --no-stream, or stdout not a terminal, prints
one snapshot. Reading usage never resumes a paused neuron.`,
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := out.mode("json", "yaml")
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			read, err := a.statsReader(ctx, args, all)
			if err != nil {
				return err
			}
			s := &statsSampler{read: read, prev: map[string]sandbox.Metrics{}}
			if mode != "table" || noStream || !isTerminal(a.Stdout) {
				rows, err := s.snapshot(ctx)
				if err != nil {
					return interrupted(ctx, err)
				}
				return a.printStats(&out, a.Stdout, mode, rows)
			}
			return interrupted(ctx, a.liveStats(ctx, s))
		},
	}
	out.add(cmd, "json, yaml", "{{.ID}} {{.CPUPercent}} {{.MemoryBytes}}")
	cmd.Flags().BoolVar(&noStream, "no-stream", false, "print one snapshot and exit")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "stopped neurons too (their disk use)")
	return cmd
}

// statsReader returns what reads the metrics of the neurons stats shows:
// the ones named (resolved now, so a bad id fails before any output), or
// every running and paused one (all: every one) at each reading.
func (a *App) statsReader(ctx context.Context, refs []string, all bool) (func(context.Context) ([]sandbox.Metrics, error), error) {
	var ids []string
	for _, ref := range refs {
		st, err := a.findState(ctx, ref)
		if err != nil {
			return nil, err
		}
		ids = append(ids, st.ID)
	}
	measure, err := a.meter(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) ([]sandbox.Metrics, error) {
		want := ids
		if len(refs) == 0 {
			sts, err := a.list(ctx, labels.Everything)
			if err != nil {
				return nil, err
			}
			want = nil
			for _, st := range sts {
				if all || st.Status == sandbox.StatusRunning || st.Status == sandbox.StatusPaused {
					want = append(want, st.ID)
				}
			}
		}
		out := make([]sandbox.Metrics, 0, len(want))
		for _, id := range want {
			m, err := measure(ctx, id)
			if err != nil {
				if len(refs) > 0 {
					return nil, err
				}
				continue // gone since the listing
			}
			out = append(out, *m)
		}
		return out, nil
	}, nil
}

// findState finds neuron ref (an id or a unique prefix), locally or
// through the daemon.
func (a *App) findState(ctx context.Context, ref string) (*sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		return remoteFind(ctx, api, ref, true)
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, err
	}
	_, st, err := set.Find(ctx, ref)
	return st, err
}

// meter returns what measures neuron id: its manager's MetricsReader, or
// the daemon's metrics route. Neither resumes a paused neuron.
func (a *App) meter(ctx context.Context) (func(context.Context, string) (*sandbox.Metrics, error), error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api != nil {
		return func(ctx context.Context, id string) (*sandbox.Metrics, error) {
			m, err := api.Neuron(id).Metrics(ctx)
			if err != nil {
				return nil, err
			}
			return metricsOf(m), nil
		}, nil
	}
	return func(ctx context.Context, id string) (*sandbox.Metrics, error) {
		mr, st, err := localCapability[sandbox.MetricsReader](ctx, a, id, "metrics", gate.Read)
		if err != nil {
			return nil, err
		}
		return mr.Metrics(ctx, st.ID)
	}, nil
}

// metricsOf is the local form of the API's metrics.
func metricsOf(m *cortex.Metrics) *sandbox.Metrics {
	return &sandbox.Metrics{ID: m.ID, At: m.At, Mode: m.Mode, Status: sandbox.Status(m.Status), CPUSeconds: m.CPUSeconds,
		MemoryBytes: m.MemoryBytes, MemoryPeakBytes: m.MemoryPeakBytes, MemoryLimitBytes: m.MemoryLimitBytes, Pids: m.Pids,
		DiskBytes: m.DiskBytes, EgressBytes: m.EgressBytes, EgressConnections: m.EgressConnections,
		UptimeSeconds: m.UptimeSeconds, OOMKills: m.OOMKills, Source: m.Source}
}

// statsSampler turns readings into rows, with CPU % from the CPU seconds
// each neuron used since its previous reading.
type statsSampler struct {
	read func(context.Context) ([]sandbox.Metrics, error)
	prev map[string]sandbox.Metrics
}

// sample reads once; a neuron seen for the first time has CPU % 0.
func (s *statsSampler) sample(ctx context.Context) ([]statsRow, error) {
	ms, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	rows := make([]statsRow, len(ms))
	seen := map[string]sandbox.Metrics{}
	for i, m := range ms {
		rows[i] = statsRow{Metrics: m}
		if p, ok := s.prev[m.ID]; ok && m.At.After(p.At) && m.CPUSeconds >= p.CPUSeconds {
			rows[i].CPUPercent = 100 * (m.CPUSeconds - p.CPUSeconds) / m.At.Sub(p.At).Seconds()
		}
		seen[m.ID] = m
	}
	s.prev = seen
	return rows, nil
}

// snapshot reads twice, statsSnapshot apart, for a CPU % of now.
func (s *statsSampler) snapshot(ctx context.Context) ([]statsRow, error) {
	if _, err := s.sample(ctx); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(statsSnapshot):
	}
	return s.sample(ctx)
}

// liveStats redraws the table every statsEvery until ctx ends.
func (a *App) liveStats(ctx context.Context, s *statsSampler) error {
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	if _, err := s.sample(ctx); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		rows, err := s.sample(ctx)
		if err != nil {
			return err
		}
		fmt.Fprint(a.Stdout, "\x1b[H\x1b[2J") // home, clear: the table redrawn in place
		if err := a.printStats(nil, a.Stdout, "table", rows); err != nil {
			return err
		}
	}
}

// printStats writes rows as JSON, YAML, the template or the table.
func (a *App) printStats(out *outputFlags, w io.Writer, mode string, rows []statsRow) error {
	if rows == nil {
		rows = []statsRow{}
	}
	if out != nil {
		if done, err := emitList(out, w, mode, rows); done {
			return err
		}
	}
	lines := make([][]string, len(rows))
	for i, r := range rows {
		lines[i] = statsLine(&r)
	}
	return table(w, []string{"NEURON", "STATUS", "CPU %", "MEM USAGE / LIMIT", "MEM PEAK", "PIDS", "DISK", "EGRESS", "UPTIME"}, lines)
}

func statsLine(r *statsRow) []string {
	if r.Status == sandbox.StatusStopped {
		return []string{r.ID, string(r.Status), "-", "-", "-", "-", bytesText(r.DiskBytes), "-", "-"}
	}
	limit := "-"
	if r.MemoryLimitBytes > 0 {
		limit = bytesText(r.MemoryLimitBytes)
	}
	peak := "-"
	if r.MemoryPeakBytes > 0 {
		peak = bytesText(r.MemoryPeakBytes)
	}
	egress := "-"
	if r.EgressBytes >= 0 {
		egress = fmt.Sprintf("%s / %d conns", bytesText(r.EgressBytes), r.EgressConnections)
	}
	uptime := (time.Duration(r.UptimeSeconds) * time.Second).String()
	return []string{r.ID, string(r.Status), fmt.Sprintf("%.2f%%", r.CPUPercent), bytesText(r.MemoryBytes) + " / " + limit, peak,
		strconv.Itoa(r.Pids), bytesText(r.DiskBytes), egress, uptime}
}

// bytesText writes n as docker stats does: 512B, 1.5KiB, 12.3MiB, 2GiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if v >= 100 || v == float64(int64(v)) {
		s = strconv.FormatFloat(v, 'f', 0, 64)
	}
	return s + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
}
