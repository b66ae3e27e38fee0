package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

func (a *App) launchCommand() *cobra.Command {
	var (
		profile, cwd string
		pty, stdio   bool
		passEnv      []string
		timeout      time.Duration
	)
	line := commandArgs{usage: "launch: give a neuron and a program (nsys-cortex launch [flags] ID [[flags] --] PROGRAM [ARG...])"}
	cmd := &cobra.Command{
		Use:   "launch [flags] ID [[flags] --] PROGRAM [ARG...]",
		Short: "Launch a hosted agent CLI (Claude Code, Codex, pi, any program) in a neuron, with a receipt",
		Long: `Launch runs exactly PROGRAM and its arguments in the neuron, after deriving
its launch contract: cwd, environment (the neuron's cleared one, the
profile's settings, and only the secrets you name with --pass-env, read
from your environment), identity, mounts, network and ceilings. A profile
whose program needs a network the neuron cannot reach fails before
anything starts. The exit status is the program's own; Ctrl-C, SIGTERM or
--timeout end its whole process group.

--pty runs it on a terminal (TUIs such as claude or codex need one);
--stdio runs it on pipes with stdin closed (claude -p, codex exec --json).
A receipt (nsys-cortex receipts ID) records what ran and how it ended, and
the audit log (<home>/logs/audit.log) who launched what and when.

` + commandLineRule("launch", "--stdio") + `

Profiles: generic, claude, codex, pi (nsys-cortex launch --profiles lists
them; add your own as <home>/profiles/NAME.json).`,
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if _, err := a.loadConfig(); err != nil {
				return err
			}
			lay, err := layout.FromEnv()
			if err != nil {
				return err
			}
			profDir := filepath.Join(lay.Home, "profiles")
			if list, _ := cmd.Flags().GetBool("profiles"); list {
				all, err := launch.Profiles(profDir)
				if err != nil {
					return err
				}
				var rows [][]string
				for _, p := range all {
					rows = append(rows, []string{p.Name, p.IO, p.InnerSandbox, strings.Join(p.Secrets, ","), p.Description})
				}
				return table(a.Stdout, []string{"PROFILE", "IO", "INNER SANDBOX", "SECRETS (--pass-env)", "WHAT"}, rows)
			}
			if api, err := a.apiClient(); err != nil {
				return err
			} else if api != nil {
				return errors.New("launch runs on the neuron's host (its receipt and the audit log are written there): run it without --api / NSYS_CORTEX_API_URL")
			}
			p, err := launch.Find(profDir, profile)
			if err != nil {
				return err
			}
			io := ""
			switch {
			case pty && stdio:
				return errors.New("--pty and --stdio contradict each other")
			case pty:
				io = launch.IOPty
			case stdio:
				io = launch.IOStdio
			}
			c, st, err := a.connect(ctx, line.ID, gate.Launch)
			if err != nil {
				return err
			}
			contract, err := launch.Plan(&launch.Request{Profile: p, IO: io, Argv: line.Argv, Cwd: cwd, PassEnv: passEnv, Lookup: os.LookupEnv}, st)
			if err != nil {
				return err
			}
			if len(contract.Passed) == 0 && len(p.Secrets) > 0 && !slices.ContainsFunc(p.Secrets, func(s string) bool { return slices.Contains(contract.Proxied, s) }) {
				fmt.Fprintf(a.Stderr, "nsys-cortex: no credentials passed; %s reads %s (pass one with --pass-env NAME)\n",
					p.Name, strings.Join(p.Secrets, " or "))
			}
			command := protocol.Command{Argv: contract.Argv, Cwd: contract.Cwd, Env: contract.Env}
			receipt := launch.NewReceipt(contract, p, st)
			h, err := c.Health(ctx)
			if err != nil {
				return fmt.Errorf("launch: asking the neuron who its commands run as, before the spawn: %w", err)
			}
			if h.Identity == nil {
				return fmt.Errorf("launch: the agent of %s (%s) does not report its identity: create the neuron again to update it", st.ID, h.Version)
			}
			receipt.Observe(h)
			dir := launch.ReceiptsDir(lay, st) // every mode records it
			if _, err := receipt.Write(dir); err != nil {
				return fmt.Errorf("launch: writing the receipt before the spawn: %w", err)
			}
			audit := launch.NewAudit(filepath.Join(lay.LogsDir(), "audit.log"))
			facts := map[string]any{"neuron": st.ID, "mode": st.Mode, "receipt": receipt.ID, "profile": p.Name,
				"program": receipt.Argv[0], "io": contract.IO, "passed": contract.Passed, "proxied": contract.Proxied, "network": receipt.Network,
				"operator": receipt.Host.User, "hostPid": receipt.Host.PID}
			if err := audit.Record("launch.start", facts); err != nil {
				return fmt.Errorf("launch: the audit log: %w", err)
			}
			code, sig, runErr := a.runLaunch(ctx, c, st.ID, contract, command, timeout)
			receipt.Finish(code, sig, runErr)
			receipt.Write(dir)
			end := map[string]any{"neuron": st.ID, "receipt": receipt.ID}
			if runErr != nil {
				end["error"] = receipt.Error // masked as the receipt is
			} else {
				end["exitCode"], end["signal"] = code, sig
			}
			audit.Record("launch.end", end)
			if runErr != nil {
				return interrupted(ctx, runErr)
			}
			return exitCode(code)
		},
	}
	takeCommandArgs(cmd, &line, func(cmd *cobra.Command) bool {
		list, _ := cmd.Flags().GetBool("profiles")
		return !list
	})
	cmd.Flags().StringVar(&profile, "profile", "generic", "launch profile: generic, claude, codex, pi, or one of yours")
	cmd.Flags().BoolVar(&pty, "pty", false, "run on a pseudo-terminal (the profile's default for TUIs)")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "run on pipes with stdin closed (headless modes)")
	cmd.Flags().StringArrayVar(&passEnv, "pass-env", nil, "pass this variable of your environment in (repeatable); nothing else of yours is passed")
	cmd.Flags().StringVarP(&cwd, "cwd", "w", "", "working directory inside the neuron (default: its workdir)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "end the program's process group after this long")
	cmd.Flags().Bool("profiles", false, "list the launch profiles")
	return cmd
}

// runLaunch runs the contract and returns the program's exit status and
// the signal that ended it, if one did.
func (a *App) runLaunch(ctx context.Context, c channel, neuron string, contract *launch.Contract, command protocol.Command, timeout time.Duration) (int, string, error) {
	if contract.IO == launch.IOPty {
		return a.pty(ctx, c, neuron, command, timeout)
	}
	req := &link.ExecRequest{Command: command, Stdout: a.Stdout, Stderr: a.Stderr, Timeout: link.NoTimeout}
	if timeout > 0 {
		req.Timeout = timeout
	}
	res, err := c.Exec(ctx, req)
	if err != nil {
		return 0, "", err
	}
	if res.TimedOut {
		fmt.Fprintf(a.Stderr, "nsys-cortex: the program ran past --timeout %s; its process group was killed\n", timeout)
		return ExitTimeout, res.Signal, nil
	}
	return res.ExitCode, res.Signal, nil
}

// receiptListing is how receipts shows a neuron's launch receipts.
var receiptListing = listing[*launch.Receipt]{
	header: []string{"RECEIPT", "PROFILE", "IO", "AS", "STARTED", "STATUS", "COMMAND"},
	row: func(r *launch.Receipt) []string {
		status := "running"
		switch {
		case r.Error != "":
			status = "failed: " + r.Error
		case r.ExitCode != nil:
			status = "exit " + strconv.Itoa(*r.ExitCode)
			if r.Signal != "" {
				status += " (" + r.Signal + ")"
			}
		}
		who := "-"
		if r.Identity != nil {
			who = fmt.Sprintf("uid %d", r.Identity.UID)
		}
		return []string{r.ID, r.Profile, r.IO, who, ago(r.Started), status, commandLine(r.Argv)}
	},
}

func (a *App) receiptsCommand() *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:               "receipts ID",
		Short:             "Show the launch receipts of a neuron (what ran, under what, how it ended)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := receiptListing.mode(&out)
			if err != nil {
				return err
			}
			if api, err := a.apiClient(); err != nil {
				return err
			} else if api != nil {
				return errors.New("receipts are on the neuron's host: run receipts there, without --api")
			}
			set, err := a.sandboxes()
			if err != nil {
				return err
			}
			_, st, err := set.Find(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			dir := launch.ReceiptsDir(a.lay, st) // every mode records it
			all, err := launch.Receipts(dir)
			if err != nil {
				return err
			}
			return receiptListing.print(&out, a.Stdout, mode, all)
		},
	}
	receiptListing.addFlags(&out, cmd, "{{.ID}} {{.ExitCode}}")
	return cmd
}
