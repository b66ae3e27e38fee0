package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/portsign"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// Port access (docs/ports.md): port-forward listens on the host and
// carries each connection to a port on the neuron's own loopback, through
// its channel; url makes a signed URL of a port for a browser.

func (a *App) portForwardCommand() *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward ID [LOCAL:]PORT...",
		Short: "Forward local ports to ports on a neuron's own loopback",
		Long: `port-forward listens on the host (127.0.0.1 unless --address) and carries
each connection to PORT on the neuron's own loopback, through the neuron's
channel: the agent connects from inside the neuron's network namespace or
guest, so it works with no network policy at all, and opens no route from
the neuron to the host. LOCAL:PORT listens on LOCAL; :PORT on a free port
it prints. It runs until Ctrl-C. A connection to a port nothing listens on
is closed, and says so on stderr; a paused neuron is resumed.`,
		Example:           "  nsys-cortex port-forward web 8000\n  nsys-cortex port-forward web 9000:8000 :5173",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: a.neuronArgsUpTo(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			type pair struct{ local, remote int }
			var pairs []pair
			for _, spec := range args[1:] {
				l, r, err := parsePortSpec(spec)
				if err != nil {
					return err
				}
				pairs = append(pairs, pair{l, r})
			}
			ctx := cmd.Context()
			dial, id, err := a.portDialer(ctx, args[0])
			if err != nil {
				return err
			}
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			for _, p := range pairs {
				ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(p.local)))
				if err != nil {
					return fmt.Errorf("listening on %s:%d (--address): %w", address, p.local, err)
				}
				lns = append(lns, ln)
				fmt.Fprintf(a.Stdout, "Forwarding from %s -> %s:%d\n", ln.Addr(), id, p.remote)
			}
			var wg sync.WaitGroup
			for i, ln := range lns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a.forward(ctx, ln, dial, id, pairs[i].remote)
				}()
			}
			<-ctx.Done()
			for _, ln := range lns {
				ln.Close()
			}
			wg.Wait()
			return nil
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "the host address to listen on")
	return cmd
}

// parsePortSpec reads [LOCAL:]PORT (":PORT": a free local port).
func parsePortSpec(spec string) (local, remote int, err error) {
	l, r, two := strings.Cut(spec, ":")
	if !two {
		r = l // PORT: the same port here
	}
	remote, err = strconv.Atoi(r)
	if err != nil || remote < 1 || remote > 65535 {
		return 0, 0, fmt.Errorf("%q: the neuron's port %q is no port (1-65535)", spec, r)
	}
	if l == "" {
		return 0, remote, nil
	}
	local, err = strconv.Atoi(l)
	if err != nil || local < 0 || local > 65535 {
		return 0, 0, fmt.Errorf("%q: the local port %q is no port (0-65535)", spec, l)
	}
	return local, remote, nil
}

// portDialer finds neuron ref and returns how to reach its ports: through
// the daemon when there is one, else through the neuron's channel here.
func (a *App) portDialer(ctx context.Context, ref string) (func(context.Context, int) (net.Conn, error), string, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, "", err
	}
	if api != nil {
		n, st, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return nil, "", err
		}
		return n.DialPort, st.ID, nil
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, "", err
	}
	m, st, err := set.Find(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	if err := a.authorize(ctx, gate.Port, st.ID); err != nil {
		return nil, "", err
	}
	if st.Status == sandbox.StatusStopped {
		return nil, "", &sandbox.NotRunningError{ID: st.ID, Hint: "nsys-cortex create " + st.ID}
	}
	c, err := m.Connect(ctx, st.ID)
	if err != nil {
		return nil, "", err
	}
	return c.DialPort, st.ID, nil
}

// forward accepts on ln until it is closed, carrying each connection to
// port through dial; it returns once every connection it carried ended.
func (a *App) forward(ctx context.Context, ln net.Listener, dial func(context.Context, int) (net.Conn, error), id string, port int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		local, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer local.Close()
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			remote, err := dial(dctx, port)
			cancel()
			if err != nil {
				fmt.Fprintf(a.Stderr, "nsys-cortex: port %d in neuron %s: %v\n", port, id, err)
				return
			}
			defer remote.Close()
			stop := context.AfterFunc(ctx, func() { local.Close(); remote.Close() })
			defer stop()
			splice(local, remote)
		}()
	}
}

// splice copies both ways until both directions end: each side's EOF is
// passed on as a half-close where the other side has one.
func splice(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	<-done
}

func copyHalf(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		cw.CloseWrite()
		return
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		src.Close()
	}
	dst.Close()
}

func (a *App) urlCommand() *cobra.Command {
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "url ID PORT",
		Short: "Print a signed URL of a port in a neuron, for a browser",
		Long: `url prints a URL that reaches PORT on the neuron's own loopback through the
daemon's proxy (serve) without the API's token, until it expires
(--expires, default 1h, at most 720h): a signature, under a key only this
host holds, of this neuron, this port and the expiry; the daemon keeps it
in a cookie for the page's later requests. With api.domain (serve
--domain) the URL is http://PORT-ID.DOMAIN/, a name of its own for the
neuron's dev server; otherwise it is under /v1/neurons/ID/ports/PORT/ on
the daemon's address. Through a daemon (--api), the daemon signs it.`,
		Example:           "  nsys-cortex url web 5173\n  nsys-cortex url web 8000 --expires 15m",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgsUpTo(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return fmt.Errorf("port %q: give 1-65535", args[1])
			}
			if expires <= 0 || expires > 720*time.Hour {
				return fmt.Errorf("--expires %s: give a duration up to 720h", expires)
			}
			u, err := a.portURL(cmd.Context(), args[0], port, expires)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, u)
			return nil
		},
	}
	cmd.Flags().DurationVar(&expires, "expires", time.Hour, "how long the URL works (at most 720h)")
	return cmd
}

// portURL signs a URL of port in neuron ref: the daemon does, when there
// is one; else it is signed here with the home's key, for the daemon this
// home serves (api.listen, api.domain).
func (a *App) portURL(ctx context.Context, ref string, port int, expires time.Duration) (string, error) {
	api, err := a.apiClient()
	if err != nil {
		return "", err
	}
	if api != nil {
		n, _, err := a.remoteNeuron(ctx, api, ref)
		if err != nil {
			return "", err
		}
		u, err := n.URL(ctx, port, expires)
		if err != nil {
			return "", err
		}
		return u.URL, nil
	}
	set, err := a.sandboxes()
	if err != nil {
		return "", err
	}
	_, st, err := set.Find(ctx, ref)
	if err != nil {
		return "", err
	}
	if err := a.authorize(ctx, gate.Port, st.ID); err != nil {
		return "", err
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return "", err
	}
	domain := cfg.String("api.domain")
	if domain != "" && !portsign.HostSafeID(st.ID) {
		return "", fmt.Errorf("neuron %s: a URL under %s needs an id of lower-case letters, digits and '-'", st.ID, domain)
	}
	lay, err := layout.FromEnv()
	if err != nil {
		return "", err
	}
	key, err := portsign.LoadKey(lay.URLKeyFile())
	if err != nil {
		return "", err
	}
	host := cfg.String("api.listen")
	if h, p, err := net.SplitHostPort(host); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
		host = net.JoinHostPort("127.0.0.1", p) // listening everywhere: reached here at least
	}
	inst, err := portsign.Instance(lay.OverlayDir(st.ID))
	if err != nil {
		return "", err
	}
	return portsign.URL(key, "http://"+host, domain, st.ID, inst, port, time.Now().Add(expires).Truncate(time.Second), "")
}
