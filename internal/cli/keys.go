package cli

import (
	"context"
	"os"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/layout"
)

// envSharedKeys is kube.api_keys' variable (kube.EnvAPIKeys, which the
// light program does not link; a test holds them equal).
const envSharedKeys = "NSYS_CORTEX_KUBE_API_KEYS"

// keyStore is the API keys' store of home lay: its own file, or, when
// kube.api_keys names a Secret, the keys every replica of a deployment
// shares. Those are reached through client-go, which only the full
// program links: the light one hands it the command, as given, and does
// not return when it can.
func (a *App) keyStore(ctx context.Context, lay layout.Layout) (*apikey.Store, error) {
	// The settings of the config file too (kube.api_keys, kube.namespace,
	// kube.kubeconfig), which loading the configuration exports.
	if _, err := a.loadConfig(); err != nil {
		return nil, err
	}
	if os.Getenv(envSharedKeys) == "" {
		return apikey.Open(lay), nil
	}
	if a.SharedKeys == nil {
		return nil, a.handOff(ctx)
	}
	sh, err := a.SharedKeys()
	if err != nil {
		return nil, err
	}
	if sh == nil {
		return apikey.Open(lay), nil
	}
	return apikey.OpenShared(lay, sh), nil
}
