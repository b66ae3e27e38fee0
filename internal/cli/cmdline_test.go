package cli

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// runWords runs a command shaped like exec on words and says what it saw:
// its neuron, command line and flags, or the error.
func runWords(words ...string) (string, error) {
	var line commandArgs
	line.usage = "run: give a neuron and a command"
	var interactive, tty bool
	var timeout time.Duration
	var env []string
	ran := ""
	cmd := &cobra.Command{
		Use: "run",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ran = fmt.Sprintf("id=%s argv=%q i=%v t=%v timeout=%v env=%q", line.ID, line.Argv, interactive, tty, timeout, env)
			return nil
		},
	}
	takeCommandArgs(cmd, &line, nil)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "")
	root := &cobra.Command{Use: "nsys-cortex", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().String("api", "", "")
	root.AddCommand(cmd)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"run"}, words...))
	if err := root.Execute(); err != nil {
		return "", err
	}
	if ran == "" {
		return "help:" + out.String(), nil
	}
	return ran, nil
}

func TestCommandArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		words []string
		want  string // what the command saw, or the start of the error
	}{
		// Flags before ID, or between ID and a --.
		{[]string{"n1", "-i", "--", "cat"}, `id=n1 argv=["cat"] i=true t=false timeout=0s env=[]`},
		{[]string{"-i", "n1", "--", "cat"}, `id=n1 argv=["cat"] i=true t=false timeout=0s env=[]`},
		{[]string{"n1", "-it", "--", "sh"}, `id=n1 argv=["sh"] i=true t=true timeout=0s env=[]`},
		{[]string{"n1", "--timeout", "5s", "--", "sleep", "1"}, `id=n1 argv=["sleep" "1"] i=false t=false timeout=5s env=[]`},
		{[]string{"n1", "--timeout=5s", "-e", "A=1", "--", "env"}, `id=n1 argv=["env"] i=false t=false timeout=5s env=["A=1"]`},
		{[]string{"-e", "A=1", "n1", "-e", "B=2", "-t", "--", "env"}, `id=n1 argv=["env"] i=false t=true timeout=0s env=["A=1" "B=2"]`},
		{[]string{"n1", "--api", "http://x", "--", "true"}, `id=n1 argv=["true"] i=false t=false timeout=0s env=[]`},
		// A leading -- only marks where the command starts.
		{[]string{"n1", "--", "ls", "-la"}, `id=n1 argv=["ls" "-la"] i=false t=false timeout=0s env=[]`},
		{[]string{"n1", "--", "-i"}, `id=n1 argv=["-i"] i=false t=false timeout=0s env=[]`},
		{[]string{"n1", "-i", "--", "--", "x"}, `id=n1 argv=["--" "x"] i=true t=false timeout=0s env=[]`},
		// Without a -- after flags, everything after ID is the command.
		{[]string{"n1", "ls", "-la"}, `id=n1 argv=["ls" "-la"] i=false t=false timeout=0s env=[]`},
		{[]string{"n1", "sh", "-c", "echo -i"}, `id=n1 argv=["sh" "-c" "echo -i"] i=false t=false timeout=0s env=[]`},
		{[]string{"n1", "-i"}, `id=n1 argv=["-i"] i=false t=false timeout=0s env=[]`},
		{[]string{"n1", "-i", "cat"}, `id=n1 argv=["-i" "cat"] i=false t=false timeout=0s env=[]`},
		{[]string{"n1", "git", "diff", "--", "f"}, `id=n1 argv=["git" "diff" "--" "f"] i=false t=false timeout=0s env=[]`},
		{[]string{"n1", "-", "--", "x"}, `id=n1 argv=["-" "--" "x"] i=false t=false timeout=0s env=[]`},
		// Between ID and --, only flags.
		{[]string{"n1", "--bogus", "--", "cat"}, "unknown flag: --bogus"},
		{[]string{"n1", "-iz", "--", "cat"}, "unknown shorthand flag: 'z'"},
		{[]string{"n1", "-i", "ls", "--", "x"}, `run: "ls" is not a flag`},
		{[]string{"n1", "--timeout", "--", "sleep", "1"}, "flag needs an argument: --timeout"},
		{[]string{"n1", "--timeout", "soon", "--", "sleep", "1"}, `invalid argument "soon"`},
		// Nothing to run.
		{nil, "run: give a neuron and a command"},
		{[]string{"n1"}, "run: give a neuron and a command"},
		{[]string{"n1", "--"}, "run: give a neuron and a command"},
		{[]string{"n1", "-i", "--"}, "run: give a neuron and a command"},
		// Help asked for between ID and -- is help, as before ID.
		{[]string{"n1", "-h", "--", "x"}, "help:"},
	} {
		t.Run(strings.Join(tc.words, " "), func(t *testing.T) {
			got, err := runWords(tc.words...)
			if err != nil {
				got = err.Error()
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("run %q: %s\nwant %s", tc.words, got, tc.want)
			}
		})
	}
}

// An error between ID and -- names the command and where its flags go.
func TestCommandArgsErrorsSayWhere(t *testing.T) {
	t.Parallel()
	_, err := runWords("n1", "--bogus", "--", "cat")
	if err == nil || !strings.Contains(err.Error(), "between ID and --, only run's flags go") {
		t.Fatalf("%v", err)
	}
	// A command that needs no command line is left alone.
	var line commandArgs
	cmd := &cobra.Command{Use: "launch", RunE: func(*cobra.Command, []string) error { return nil }}
	cmd.Flags().Bool("profiles", false, "")
	takeCommandArgs(cmd, &line, func(cmd *cobra.Command) bool {
		list, _ := cmd.Flags().GetBool("profiles")
		return !list
	})
	cmd.SetArgs([]string{"--profiles"})
	if err := cmd.Execute(); err != nil || line.ID != "" || !slices.Equal(line.Argv, nil) {
		t.Fatalf("%v %+v", err, line)
	}
}
