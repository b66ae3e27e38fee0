package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"text/template"

	"github.com/spf13/cobra"
)

// outputFlags are the -o/--json/--format flags every read command has.
type outputFlags struct {
	output string
	json   bool
	format string
}

func (o *outputFlags) add(cmd *cobra.Command, formats, example string) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: "+formats)
	cmd.Flags().BoolVar(&o.json, "json", false, "short for -o json")
	cmd.Flags().StringVar(&o.format, "format", "", "format each item with a Go template, e.g. '"+example+"' ({{json .}} prints an item as JSON)")
}

// mode returns the chosen format, checked against the allowed ones.
func (o *outputFlags) mode(allowed ...string) (string, error) {
	m := o.output
	if o.json {
		if m != "" && m != "json" {
			return "", fmt.Errorf("--json and -o %s contradict each other", m)
		}
		m = "json"
	}
	if o.format != "" {
		if m != "" {
			return "", fmt.Errorf("--format and -o %s contradict each other", m)
		}
		return "template", nil
	}
	if m == "" {
		return "table", nil
	}
	for _, a := range allowed {
		if a == m {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown output format %q (choose from %s)", m, strings.Join(allowed, ", "))
}

// emitList is emit for a list: the template runs once per element.
func emitList[T any](o *outputFlags, w io.Writer, mode string, list []T) (bool, error) {
	items := make([]any, len(list))
	for i := range list {
		items[i] = list[i]
	}
	return o.emit(w, mode, list, items)
}

// emit writes v (a value or a slice of them) as JSON, YAML or through the
// template; it reports false when the format is a table for the caller to draw.
func (o *outputFlags) emit(w io.Writer, mode string, v any, items []any) (bool, error) {
	switch mode {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		var generic any
		b, err := json.Marshal(v)
		if err != nil {
			return true, err
		}
		if err := json.Unmarshal(b, &generic); err != nil {
			return true, err
		}
		writeYAML(w, generic, 0, false)
		return true, nil
	case "template":
		tmpl, err := template.New("format").Funcs(template.FuncMap{"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		}}).Parse(o.format)
		if err != nil {
			return true, fmt.Errorf("--format: %w", err)
		}
		for _, it := range items {
			if err := tmpl.Execute(w, it); err != nil {
				return true, fmt.Errorf("--format: %w", err)
			}
			fmt.Fprintln(w)
		}
		return true, nil
	}
	return false, nil
}

// listing is how a list command shows its items beyond JSON, YAML and
// --format: a table of header and one row per item, the item's name for
// -o name (nil: the command has no -o name), and the columns -o wide adds
// (none: no -o wide).
type listing[T any] struct {
	header  []string
	row     func(T) []string
	name    func(T) string
	wide    []string
	wideRow func(T) []string
}

// formats are the -o values the listing takes.
func (l *listing[T]) formats() []string {
	f := []string{"json", "yaml"}
	if l.wide != nil {
		f = append(f, "wide")
	}
	if l.name != nil {
		f = append(f, "name")
	}
	return f
}

// addFlags adds -o, --json and --format to cmd (example: a --format template).
func (l *listing[T]) addFlags(o *outputFlags, cmd *cobra.Command, example string) {
	o.add(cmd, strings.Join(l.formats(), ", "), example)
}

// mode returns the format the flags chose, checked before the command
// does any work.
func (l *listing[T]) mode(o *outputFlags) (string, error) { return o.mode(l.formats()...) }

// print writes list in mode: JSON, YAML, the template once per item, the
// names, or the table. A nil list is an empty one (-o json prints [], not
// null).
func (l *listing[T]) print(o *outputFlags, w io.Writer, mode string, list []T) error {
	if list == nil {
		list = []T{}
	}
	if done, err := emitList(o, w, mode, list); done {
		return err
	}
	if mode == "name" {
		for _, it := range list {
			fmt.Fprintln(w, l.name(it))
		}
		return nil
	}
	wide := mode == "wide"
	header := l.header
	if wide {
		header = append(append([]string(nil), header...), l.wide...)
	}
	rows := make([][]string, 0, len(list))
	for _, it := range list {
		r := l.row(it)
		if wide {
			r = append(r, l.wideRow(it)...)
		}
		rows = append(rows, r)
	}
	return table(w, header, rows)
}

// table writes aligned columns, in one write where they fit its buffer:
// a tabwriter writes each cell and each cell's padding apart, ten system
// calls a line of `list` straight to a terminal or a pipe.
func table(w io.Writer, header []string, rows [][]string) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

// writeYAML writes a JSON-decoded value as block YAML.
func writeYAML(w io.Writer, v any, indent int, inList bool) {
	pad := strings.Repeat("  ", indent)
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			fmt.Fprintln(w, "{}")
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			p := pad
			if inList && i == 0 {
				p = ""
			}
			switch x[k].(type) {
			case map[string]any, []any:
				if isEmpty(x[k]) {
					fmt.Fprintf(w, "%s%s: %s\n", p, k, emptyYAML(x[k]))
					continue
				}
				fmt.Fprintf(w, "%s%s:\n", p, k)
				writeYAML(w, x[k], indent+1, false)
			default:
				fmt.Fprintf(w, "%s%s: %s\n", p, k, yamlScalar(x[k]))
			}
		}
	case []any:
		if len(x) == 0 {
			fmt.Fprintln(w, pad+"[]")
			return
		}
		for _, it := range x {
			switch it.(type) {
			case map[string]any:
				fmt.Fprintf(w, "%s- ", pad)
				writeYAML(w, it, indent+1, true)
			default:
				fmt.Fprintf(w, "%s- %s\n", pad, yamlScalar(it))
			}
		}
	default:
		fmt.Fprintln(w, pad+yamlScalar(x))
	}
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

func emptyYAML(v any) string {
	if _, ok := v.([]any); ok {
		return "[]"
	}
	return "{}"
}

func yamlScalar(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		return strconv.Quote(x)
	}
	return fmt.Sprint(v)
}
