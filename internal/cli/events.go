package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
)

// untilGrace is how long after --until the stream waits for events
// stamped before it (an append stamps its time, then writes).
const untilGrace = 250 * time.Millisecond

func (a *App) eventsCommand() *cobra.Command {
	var out outputFlags
	var since, untilFlag, selector string
	cmd := &cobra.Command{
		Use:   "events [--since T] [--until T] [-l SELECTOR]",
		Short: "Stream what happens to neurons (created, paused, timeout, ...)",
		Long: `events prints the lifecycle events of the home's neurons as they happen, as
docker events does, until interrupted: created, started, paused, resumed,
stopped, destroyed, wiped, timeout, auto-paused, agent-died, oom-killed,
snapshot-created and snapshot-restored, each with its time, neuron, labels
(as they were then), reason and who asked. Every host process records
them (a CLI in another terminal, the keeper, the daemon), so they are all
seen here.

--since starts with the recorded events from a time: a duration ago (10m)
or an RFC 3339 time. --until ends the stream at a time (a duration ago,
or an RFC 3339 time): --until 0s prints what is recorded and exits. -l
keeps the events of neurons whose labels matched the selector. -o json
prints one JSON object a line.`,
		Example: "  nsys-cortex events --since 10m -l team=a\n  nsys-cortex events --since 1h --until 0s -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := out.mode("json")
			if err != nil {
				return err
			}
			now := time.Now()
			f := events.Filter{Since: now}
			if since != "" {
				if f.Since, err = events.ParseTime(since, now); err != nil {
					return fmt.Errorf("--since: %w", err)
				}
			}
			if untilFlag != "" {
				if f.Until, err = events.ParseTime(untilFlag, now); err != nil {
					return fmt.Errorf("--until: %w", err)
				}
			}
			if f.Selector, err = labels.Parse(selector); err != nil {
				return err
			}
			print, err := a.eventPrinter(&out, mode)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			err = a.streamEvents(ctx, f, print)
			return interrupted(ctx, err)
		},
	}
	out.add(cmd, "json", "{{.Time}} {{.Type}} {{.Neuron}}")
	cmd.Flags().StringVar(&since, "since", "", "print the recorded events from this time on: a duration ago (10m) or an RFC 3339 time (default: now)")
	cmd.Flags().StringVar(&untilFlag, "until", "", "stop at this time: a duration ago (0s: now) or an RFC 3339 time (default: follow until interrupted)")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only the events of neurons whose labels match, e.g. team=a")
	return cmd
}

// eventPrinter returns what prints one event in mode: a line like docker
// events', a JSON object a line, or the --format template.
func (a *App) eventPrinter(out *outputFlags, mode string) (func(events.Event) error, error) {
	switch mode {
	case "json":
		enc := json.NewEncoder(a.Stdout)
		return func(ev events.Event) error { return enc.Encode(ev) }, nil
	case "template":
		// Parsed now, so a bad template fails before anything is read.
		if _, err := out.emit(io.Discard, mode, nil, nil); err != nil {
			return nil, err
		}
		return func(ev events.Event) error {
			_, err := out.emit(a.Stdout, mode, ev, []any{ev})
			return err
		}, nil
	}
	return func(ev events.Event) error {
		_, err := fmt.Fprintln(a.Stdout, eventLine(ev))
		return err
	}, nil
}

// eventLine is an event as events prints it:
// TIME TYPE NEURON (mode=..., by=..., reason="...", labels="k=v,...").
func eventLine(ev events.Event) string {
	attrs := ""
	add := func(k, v string) {
		if v == "" {
			return
		}
		if attrs != "" {
			attrs += ", "
		}
		attrs += k + "=" + v
	}
	add("mode", ev.Mode)
	add("by", ev.Principal)
	if ev.Reason != "" {
		add("reason", strconv.Quote(ev.Reason))
	}
	if len(ev.Labels) > 0 {
		add("labels", strconv.Quote(ev.Labels.String()))
	}
	line := ev.Time.Local().Format("2006-01-02T15:04:05.000000000Z07:00") + " " + string(ev.Type) + " " + ev.Neuron
	if attrs != "" {
		line += " (" + attrs + ")"
	}
	return line
}

// streamEvents calls print for each event that passes f, recorded then
// new, through the daemon or from the home's log, until ctx ends (nil) or
// f.Until passes.
func (a *App) streamEvents(ctx context.Context, f events.Filter, print func(events.Event) error) error {
	api, err := a.apiClient()
	if err != nil {
		return err
	}
	if api != nil {
		for ev, err := range api.Events(ctx, cortex.EventsOptions{Since: f.Since, Until: f.Until, LabelSelector: f.Selector.String()}) {
			if err != nil {
				return err
			}
			if err := print(eventOf(ev)); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := a.loadConfig(); err != nil {
		return err
	}
	lay, err := layout.FromEnv()
	if err != nil {
		return err
	}
	log := events.Open(lay)
	if !f.Until.IsZero() && !f.Until.After(time.Now()) {
		evs, err := log.Read(f)
		for _, ev := range evs {
			if err := print(ev); err != nil {
				return err
			}
		}
		return err
	}
	fctx := ctx
	if !f.Until.IsZero() {
		var cancel context.CancelFunc
		fctx, cancel = context.WithDeadline(ctx, f.Until.Add(untilGrace))
		defer cancel()
	}
	err = log.Follow(fctx, f, print)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil // --until passed
	}
	return err
}

// eventOf is the local form of the API's event.
func eventOf(ev cortex.NeuronEvent) events.Event {
	return events.Event{Time: ev.Time, Type: events.Type(ev.Type), Neuron: ev.Neuron, Mode: ev.Mode,
		Labels: labels.Set(ev.Labels), Reason: ev.Reason, Principal: ev.Principal}
}
