//go:build linux

package agent

import (
	"io/fs"
	"os"

	"github.com/nsys-cortex/cortex/internal/agent/search"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// searchCmd runs the search engine over the neuron's confined files.
func (a *Agent) searchCmd(req *request) (any, []byte, error) {
	var args protocol.SearchArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	res, err := search.Run(req.ctx, jailFS{a.fs}, &args)
	if err != nil {
		return nil, nil, err
	}
	return res, nil, nil
}

// jailFS is the agent's confined file system as the search engine reads it.
type jailFS struct{ f *fsys }

func (j jailFS) OpenFile(p string, flag int, perm fs.FileMode) (*os.File, string, error) {
	return j.f.openFile(p, flag, perm)
}

func (j jailFS) Stat(p string, follow bool) (fs.FileInfo, string, error) { return j.f.stat(p, follow) }
