package config

import (
	"fmt"
	"slices"
	"strings"
)

// Type is the kind of value a key holds.
type Type int

// The types of keys.
const (
	// TypeString is any text (a key may check it further).
	TypeString Type = iota
	// TypeBool is true or false; 1 and 0 are accepted too.
	TypeBool
	// TypeInt is a whole number, zero or more.
	TypeInt
	// TypeBytes is a size in bytes, written with an optional binary suffix:
	// 4096, 512k, 100m, 1g, 1.5g (k=1024).
	TypeBytes
	// TypeDuration is a Go duration, zero or more: 500ms, 10s, 168h.
	TypeDuration
	// TypeEnum is one of the key's Allowed values.
	TypeEnum
)

// String returns the name of t: string, bool, int, bytes, duration or enum.
func (t Type) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeBool:
		return "bool"
	case TypeInt:
		return "int"
	case TypeBytes:
		return "bytes"
	case TypeDuration:
		return "duration"
	case TypeEnum:
		return "enum"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Key is one setting.
type Key struct {
	// Name is the key's name in the file and on the command line, dotted:
	// api.listen.
	Name string
	// Env is the environment variable that sets it: NSYS_CORTEX_API_LISTEN.
	Env string
	// Type is the kind of value.
	Type Type
	// Allowed are the values of an enum.
	Allowed []string
	// Default is the value when nothing sets it, written as a user would.
	Default string
	// Description says in one line what the key does.
	Description string
	// Secret keys are never put in the environment by Apply and never
	// shown by Display.
	Secret bool

	// form describes the accepted values where the type alone does not.
	form string
	// check refines the type's own parsing.
	check func(string) error
	// zeroNone lets a size be 0, which means none.
	zeroNone bool
}

// Form describes the values k accepts, for error messages and help:
// "true or false", "one of auto, unix, tcp", ...
func (k Key) Form() string {
	if k.form != "" {
		return k.form
	}
	switch k.Type {
	case TypeBool:
		return "true or false"
	case TypeInt:
		return "a whole number, 0 or more"
	case TypeBytes:
		return "a size like 4096, 512k, 100m or 1g"
	case TypeDuration:
		return "a duration like 500ms, 10s or 168h"
	case TypeEnum:
		return "one of " + strings.Join(k.Allowed, ", ")
	}
	return "text"
}

// keys is the schema, sorted by name (TestKeysSorted checks it).
var keys = []Key{
	{Name: "allow_insecure_dev", Env: "NSYS_CORTEX_ALLOW_INSECURE_DEV", Type: TypeBool, Default: "false",
		Description: "allow process mode, which runs neurons without isolation"},
	{Name: "api.domain", Env: "NSYS_CORTEX_API_DOMAIN", Type: TypeString, Default: "",
		Description: "serve routes <port>-<id>.DOMAIN to port of neuron id (a dev server at the root of a name of its own); nsys-cortex url makes such URLs"},
	{Name: "api.images", Env: "NSYS_CORTEX_API_IMAGES", Type: TypeString, Default: "",
		Description: "comma-separated images API clients may ask for besides those Cortex built (a create's image is otherwise refused)"},
	{Name: "api.key_neurons", Env: "NSYS_CORTEX_API_KEY_NEURONS", Type: TypeInt, Default: "100",
		Description: "neurons (running or paused) an API key may see before its creates are answered 429, unless the key sets its own (token create --max-neurons); 0: no limit"},
	{Name: "api.key_rate", Env: "NSYS_CORTEX_API_KEY_RATE", Type: TypeInt, Default: "100",
		Description: "requests a second an API key may send (bursts of twice that) before it is answered 429, unless the key sets its own (token create --rate); 0: no limit"},
	{Name: "api.listen", Env: "NSYS_CORTEX_API_LISTEN", Type: TypeString, Default: "127.0.0.1:3100",
		Description: "address the API daemon (serve) listens on", check: nonEmpty},
	{Name: "api.max_upload", Env: "NSYS_CORTEX_API_MAX_UPLOAD", Type: TypeBytes, Default: "1g",
		Description: "largest file upload body the API accepts"},
	{Name: "api.shutdown_grace", Env: "NSYS_CORTEX_API_SHUTDOWN_GRACE", Type: TypeDuration, Default: "10s",
		Description: "how long the daemon lets requests finish when asked to stop"},
	{Name: "api.token", Env: "NSYS_CORTEX_API_TOKEN", Type: TypeString, Default: "", Secret: true,
		Description: "bearer token of the API (the daemon always requires one, the CLI sends it); unset, serve makes one and keeps it in the home's api.token file"},
	{Name: "api.url", Env: "NSYS_CORTEX_API_URL", Type: TypeString, Default: "",
		Description: "when set, the CLI talks to the daemon at this URL instead of running neurons itself"},
	{Name: "chat.checkpoints", Env: "NSYS_CORTEX_CHAT_CHECKPOINTS", Type: TypeInt, Default: "20",
		Description: "checkpoints of a neuron's files kept for rewinding chats (0: none)"},
	{Name: "chat.context_window", Env: "NSYS_CORTEX_CHAT_CONTEXT_WINDOW", Type: TypeInt, Default: "200000",
		Description: "the chat model's context window in tokens (compaction keeps the history within it)"},
	{Name: "chat.max_steps", Env: "NSYS_CORTEX_CHAT_MAX_STEPS", Type: TypeInt, Default: "50",
		Description: "model calls per chat turn before it stops"},
	{Name: "chat.suggestions", Env: "NSYS_CORTEX_CHAT_SUGGESTIONS", Type: TypeBool, Default: "true",
		Description: "suggest the next request as ghost text in interactive chats"},
	{Name: "disk", Env: "NSYS_CORTEX_DISK", Type: TypeBytes, Default: "10g", zeroNone: true, form: "a size like 512m or 10g, or 0 for none",
		Description: "disk ceiling of a new neuron that names none (a filesystem of its own; where the mode cannot enforce one, e.g. not as root, it is left out); 0: none"},
	{Name: "docker.image", Env: "NSYS_CORTEX_DOCKER_IMAGE", Type: TypeString, Default: "nsys-cortex-neuron:latest",
		Description: "image docker-mode neurons run", check: nonEmpty},
	{Name: "docker.network", Env: "NSYS_CORTEX_DOCKER_NETWORK", Type: TypeString, Default: "",
		Description: "docker network of a neuron with network full (empty: the daemon's default)"},
	{Name: "docker.transport", Env: "NSYS_CORTEX_DOCKER_TRANSPORT", Type: TypeEnum, Allowed: []string{"auto", "unix", "tcp"}, Default: "auto",
		Description: "channel to docker-mode neurons: a shared unix socket or tcp with a token"},
	{Name: "egress.upstream_ca", Env: "NSYS_CORTEX_EGRESS_UPSTREAM_CA", Type: TypeString, Default: "",
		Description: "a PEM file of authorities the egress proxy trusts, besides the host's roots, for the servers of neurons' secrets (docs/secrets.md)"},
	{Name: "kube.allow_open_network", Env: "NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK", Type: TypeBool, Default: "false",
		Description: "kube mode: run neurons even where the network probe found that the cluster's network plugin ignores NetworkPolicy, so that they reach the network; otherwise creates there are refused UNENFORCEABLE (docs/kube.md)"},
	{Name: "kube.api_keys", Env: "NSYS_CORTEX_KUBE_API_KEYS", Type: TypeString, Default: "",
		Description: "kube mode: the Secret of kube.host_namespace that holds the API keys every replica shares (token create/list/rm and serve use it); empty: each home's own (docs/kube.md)"},
	{Name: "kube.chat_sessions", Env: "NSYS_CORTEX_KUBE_CHAT_SESSIONS", Type: TypeBool, Default: "false",
		Description: "kube mode: serve keeps chat sessions in Secrets of kube.host_namespace, so that every replica serves the same sessions and a replica whose home goes loses none; otherwise each home keeps its own (docs/sessions.md)"},
	{Name: "kube.home_size", Env: "NSYS_CORTEX_KUBE_HOME_SIZE", Type: TypeBytes, Default: "10g",
		Description: "kube mode: the size of each neuron's home volume (a PersistentVolumeClaim; docs/kube.md)"},
	{Name: "kube.host_namespace", Env: "NSYS_CORTEX_KUBE_HOST_NAMESPACE", Type: TypeString, Default: "",
		Description: "kube mode: the namespace the hosts run in and keep their API keys' and chat sessions' Secrets in, apart from the neurons; empty: kube.namespace (docs/kube.md)"},
	{Name: "kube.image", Env: "NSYS_CORTEX_KUBE_IMAGE", Type: TypeString, Default: "",
		Description: "kube mode: the neuron image the cluster pulls, with the agent at /usr/local/bin/cortex-agent; empty: kube mode is off (docs/kube.md)"},
	{Name: "kube.kubeconfig", Env: "NSYS_CORTEX_KUBE_KUBECONFIG", Type: TypeString, Default: "",
		Description: "kube mode: the kubeconfig file that reaches the cluster; empty: KUBECONFIG, ~/.kube/config, or the pod's service account"},
	{Name: "kube.namespace", Env: "NSYS_CORTEX_KUBE_NAMESPACE", Type: TypeString, Default: "nsys-cortex",
		Description: "kube mode: the namespace that holds the neurons"},
	{Name: "kube.port_forward", Env: "NSYS_CORTEX_KUBE_PORT_FORWARD", Type: TypeBool, Default: "false",
		Description: "kube mode: reach the neurons' agents through the API server's port-forward instead of their pods' IPs, from a host outside the cluster (--kube-port-forward); for development (docs/kube.md)"},
	{Name: "kube.runtime_class", Env: "NSYS_CORTEX_KUBE_RUNTIME_CLASS", Type: TypeString, Default: "",
		Description: "kube mode: the RuntimeClass neuron pods run under (gvisor, kata); empty: the cluster's default runtime"},
	{Name: "kube.signing_key", Env: "NSYS_CORTEX_KUBE_SIGNING_KEY", Type: TypeString, Default: "",
		Description: "kube mode: the Ed25519 key (PKCS#8 PEM) that signs the tokens a pod's agent checks; empty: HOME/kube/signing.key, made when missing. Every host of a namespace must share it"},
	{Name: "kube.storage_class", Env: "NSYS_CORTEX_KUBE_STORAGE_CLASS", Type: TypeString, Default: "",
		Description: "kube mode: the StorageClass of the home volumes; empty: the cluster's default"},
	{Name: "kube.warm_pool", Env: "NSYS_CORTEX_KUBE_WARM_POOL", Type: TypeInt, Default: "0",
		Description: "kube mode: how many warm neurons agent-sandbox's SandboxWarmPool keeps ready in kube.namespace, so that a create is a SandboxClaim of one; 0: none (docs/kube.md)"},
	{Name: "llm.base_url", Env: "NSYS_CORTEX_LLM_BASE_URL", Type: TypeString, Default: "",
		Description: "base URL of the chat provider's API (empty: the provider's default)"},
	{Name: "llm.key_env", Env: "NSYS_CORTEX_LLM_KEY_ENV", Type: TypeString, Default: "",
		Description: "environment variable holding the chat provider's API key (empty: the provider's usual one)"},
	{Name: "llm.model", Env: "NSYS_CORTEX_MODEL", Type: TypeString, Default: "",
		Description: "model nsys-cortex chat uses"},
	{Name: "llm.provider", Env: "NSYS_CORTEX_PROVIDER", Type: TypeString, Default: "",
		Description: "provider nsys-cortex chat uses: anthropic, openai, gemini, ollama, vllm, lmstudio, sglang, grok, mistral"},
	{Name: "log.console", Env: "NSYS_CORTEX_LOG_CONSOLE", Type: TypeBool, Default: "false",
		Description: "also write the daemon's log, and its audit facts (JSON lines), to stderr: in a container, to the logs its cluster keeps"},
	{Name: "log.level", Env: "NSYS_CORTEX_LOG_LEVEL", Type: TypeString, Default: "info",
		Description: "log levels: LEVEL[,component=LEVEL...], e.g. info,api=debug",
		form:        "LEVEL[,component=LEVEL...] with levels " + strings.Join(levelNames, ", "), check: checkLevelSpec},
	{Name: "log.max_age", Env: "NSYS_CORTEX_LOG_MAX_AGE", Type: TypeDuration, Default: "168h",
		Description: "delete rotated log files older than this (0: keep them)"},
	{Name: "log.max_files", Env: "NSYS_CORTEX_LOG_MAX_FILES", Type: TypeInt, Default: "10",
		Description: "rotated log files to keep (0: all)"},
	{Name: "log.max_size", Env: "NSYS_CORTEX_LOG_MAX_SIZE", Type: TypeBytes, Default: "50m",
		Description: "rotate the log file when it grows past this size"},
	{Name: "mode", Env: "NSYS_CORTEX_MODE", Type: TypeString, Default: "auto",
		Description: "isolation mode of new neurons: auto or a mode doctor lists", check: nonEmpty},
	{Name: "overlay_store_dir", Env: "NSYS_CORTEX_OVERLAY_STORE_DIR", Type: TypeString, Default: "",
		Description: "where neurons' persistent data lives (empty: <home>/overlays)"},
	{Name: "pool", Env: "NSYS_CORTEX_POOL", Type: TypeString, Default: "",
		Description: "warm pools the daemon (serve) keeps: neurons booted ahead, claimed by creates of new ids (docs/pool.md)",
		form:        "MODE=N[,MODE=N...], e.g. nsbox=8", check: checkPools},
	{Name: "snapshots.max", Env: "NSYS_CORTEX_SNAPSHOTS_MAX", Type: TypeInt, Default: "64",
		Description: "snapshots a neuron may keep at most (0: no cap)"},
	{Name: "snapshots.max_bytes", Env: "NSYS_CORTEX_SNAPSHOTS_MAX_BYTES", Type: TypeBytes, Default: "64g",
		Description: "bytes a neuron's snapshots may hold together at most (0: no cap)"},
}

// byName indexes keys.
var byName = func() map[string]int {
	m := make(map[string]int, len(keys))
	for i, k := range keys {
		m[k.Name] = i
	}
	return m
}()

// Keys returns every key, sorted by name.
func Keys() []Key {
	out := make([]Key, len(keys))
	for i, k := range keys {
		k.Allowed = slices.Clone(k.Allowed)
		out[i] = k
	}
	return out
}

// Names returns the names of every key, sorted.
func Names() []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Name
	}
	return out
}

// UnknownKeyError is the error of a name that is not a key.
type UnknownKeyError struct {
	Name string
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("unknown key %q; known keys: %s", e.Name, strings.Join(Names(), ", "))
}

// Lookup returns the key called name, or an *UnknownKeyError that lists
// the known ones.
func Lookup(name string) (Key, error) {
	i, ok := byName[name]
	if !ok {
		return Key{}, &UnknownKeyError{Name: name}
	}
	k := keys[i]
	k.Allowed = slices.Clone(k.Allowed)
	return k, nil
}

// mustLookup is Lookup for names written in code: an unknown one is a
// programming error.
func mustLookup(name string) Key {
	i, ok := byName[name]
	if !ok {
		panic(fmt.Sprintf("config: %v", &UnknownKeyError{Name: name}))
	}
	return keys[i]
}
