package kube

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"time"

	"github.com/klauspost/compress/gzip"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// EnvChatSessions turns on chat sessions in the cluster (config key
// kube.chat_sessions): serve keeps them in Secrets of kube.namespace.
const EnvChatSessions = "NSYS_CORTEX_KUBE_CHAT_SESSIONS"

// What a chat session's Secret holds.
const (
	// LabelChat marks the Secrets of chat sessions.
	LabelChat = "neuron.nsys-cortex/chat-session"
	// AnnotationChatID is the session's id (a Secret's name is a hash of
	// it: ids may hold what names may not).
	AnnotationChatID = "neuron.nsys-cortex/chat-id"
	// AnnotationChatGeneration counts the session's saves.
	AnnotationChatGeneration = "neuron.nsys-cortex/chat-generation"
	// AnnotationChatHolder is the replica a change is under way through,
	// and until when it holds the session (JSON chatHold).
	AnnotationChatHolder = "neuron.nsys-cortex/chat-holder"
	// AnnotationChatInfo describes the session for lists (JSON, the
	// daemon's).
	AnnotationChatInfo = "neuron.nsys-cortex/chat-info"
	// AnnotationChatFull marks a session a save found too large for its
	// Secret: it takes no more changes (the value says why).
	AnnotationChatFull = "neuron.nsys-cortex/chat-full"
	// chatFile is the key of the session's file, gzip-compressed.
	chatFile = "session.jsonl.gz"
	// MaxChatStored bounds a session's compressed file: a Secret holds at
	// most 1 MiB, its annotations included.
	MaxChatStored = 900 << 10
	// maxChatInfo bounds the description kept for lists.
	maxChatInfo = 16 << 10
	// chatHoldFor is how long a hold lasts unless taken again.
	chatHoldFor = time.Minute
)

// maxChatFile bounds a session's file as a Secret holds it,
// uncompressed (a variable for tests).
var maxChatFile = 256 << 20

// chatHold is who holds a session, until when.
type chatHold struct {
	Who   string    `json:"who"`
	Until time.Time `json:"until"`
}

// SecretSessions keeps chat sessions in Secrets of a namespace, one per
// session (api.SessionStore): the replicas of a deployment serve the
// same sessions, and a replica whose home goes loses none.
type SecretSessions struct {
	Core kubernetes.Interface
	// Meta, when set, reads the Secrets' metadata alone (a session's
	// generation, holder and description) without their data, which is
	// up to 900 KiB each; nil reads them whole.
	Meta      metadata.Interface
	Namespace string
	// Who is this replica, in holds.
	Who string
	// now is the clock (tests).
	now func() time.Time
}

// SecretSessionsFromEnv is the store EnvChatSessions turns on, reached
// as kube mode reaches its cluster (kube.kubeconfig), in the hosts'
// namespace (kube.host_namespace, else kube.namespace); nil when it is
// off.
func SecretSessionsFromEnv() (*SecretSessions, error) {
	on, err := strconv.ParseBool(cmp.Or(os.Getenv(EnvChatSessions), "false"))
	if err != nil {
		return nil, errdefs.New(errdefs.Invalid, fmt.Sprintf("kube.chat_sessions %q: not true or false", os.Getenv(EnvChatSessions)))
	}
	if !on {
		return nil, nil
	}
	ns, err := hostNamespaceFromEnv()
	if err != nil {
		return nil, fmt.Errorf("kube.chat_sessions: %w", err)
	}
	rc, err := RESTConfig(os.Getenv(EnvKubeconfig))
	if err != nil {
		return nil, fmt.Errorf("kube.chat_sessions: %w", err)
	}
	rc.Timeout = 30 * time.Second
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube.chat_sessions: %w", err)
	}
	meta, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube.chat_sessions: %w", err)
	}
	s := NewSecretSessions(core, ns)
	s.Meta = meta
	return s, nil
}

// NewSecretSessions is the store of namespace ns, for a replica named
// after this host and a random suffix (a replica started again is
// another holder).
func NewSecretSessions(core kubernetes.Interface, ns string) *SecretSessions {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return &SecretSessions{Core: core, Namespace: ns, Who: host + "-" + hex.EncodeToString(b[:])}
}

// ChatSecretName is the name of session id's Secret.
func ChatSecretName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "nsys-cortex-chat-" + hex.EncodeToString(sum[:12])
}

func (s *SecretSessions) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// secretsResource is what the metadata client asks for.
var secretsResource = corev1.SchemeGroupVersion.WithResource("secrets")

// get reads the metadata of session id's Secret (its labels and
// annotations, never its data, where s.Meta can): NOT_FOUND when there
// is none, or one that is not id's.
func (s *SecretSessions) get(ctx context.Context, id string) (*metav1.ObjectMeta, int64, error) {
	var meta *metav1.ObjectMeta
	var err error
	if s.Meta != nil {
		var pm *metav1.PartialObjectMetadata
		if pm, err = s.Meta.Resource(secretsResource).Namespace(s.Namespace).Get(ctx, ChatSecretName(id), metav1.GetOptions{}); err == nil {
			meta = &pm.ObjectMeta
		}
	} else {
		var sec *corev1.Secret
		if sec, err = s.Core.CoreV1().Secrets(s.Namespace).Get(ctx, ChatSecretName(id), metav1.GetOptions{}); err == nil {
			meta = &sec.ObjectMeta
		}
	}
	if apierrors.IsNotFound(err) {
		return nil, 0, errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s is not in the cluster", id))
	}
	if err != nil {
		return nil, 0, explain(err, "get", "secrets", s.Namespace)
	}
	gen, err := s.check(meta, id)
	return meta, gen, err
}

// check says whether meta is session id's Secret's, and its generation.
func (s *SecretSessions) check(meta *metav1.ObjectMeta, id string) (int64, error) {
	if meta.Labels[LabelChat] != "true" || meta.Annotations[AnnotationChatID] != id {
		return 0, errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s is not in the cluster (Secret %s/%s is not its)", id, s.Namespace, meta.Name))
	}
	gen, err := strconv.ParseInt(meta.Annotations[AnnotationChatGeneration], 10, 64)
	if err != nil || gen < 1 || gen > 1<<53 {
		return 0, errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s's Secret %s/%s is damaged: generation %q", id, s.Namespace, meta.Name, meta.Annotations[AnnotationChatGeneration]))
	}
	return gen, nil
}

// heldByOther reports who else holds the session of meta now ("": no
// one).
func (s *SecretSessions) heldByOther(meta *metav1.ObjectMeta) string {
	var h chatHold
	raw := meta.Annotations[AnnotationChatHolder]
	if raw == "" || json.Unmarshal([]byte(raw), &h) != nil {
		return "" // none, or one no one can claim
	}
	if h.Who == s.Who || !s.clock().Before(h.Until) {
		return ""
	}
	return h.Who
}

func busy(id, who string) error {
	return errdefs.New(errdefs.Busy, fmt.Sprintf("session %s is being changed through replica %s (one request at a time per session; retry once it is done)", id, who))
}

// Generation is session id's generation.
func (s *SecretSessions) Generation(ctx context.Context, id string) (int64, error) {
	_, gen, err := s.get(ctx, id)
	return gen, err
}

// Hold takes session id for a change through this replica, for a minute.
func (s *SecretSessions) Hold(ctx context.Context, id string) (int64, error) {
	var gen int64
	err := s.change(ctx, id, func(meta *metav1.ObjectMeta, g int64) ([]byte, error) {
		if who := s.heldByOther(meta); who != "" {
			return nil, busy(id, who)
		}
		if full := meta.Annotations[AnnotationChatFull]; full != "" {
			return nil, errdefs.New(errdefs.TooLarge, fmt.Sprintf("session %s takes no more changes: %s; start a new session", id, full))
		}
		h, _ := json.Marshal(chatHold{Who: s.Who, Until: s.clock().Add(chatHoldFor).UTC()})
		meta.Annotations[AnnotationChatHolder] = string(h)
		gen = g
		return nil, nil
	})
	return gen, err
}

// Release ends this replica's hold of session id.
func (s *SecretSessions) Release(ctx context.Context, id string) error {
	return s.change(ctx, id, func(meta *metav1.ObjectMeta, _ int64) ([]byte, error) {
		var h chatHold
		raw, has := meta.Annotations[AnnotationChatHolder]
		if !has || json.Unmarshal([]byte(raw), &h) == nil && h.Who != s.Who {
			return nil, errNoChange // none, or another's
		}
		delete(meta.Annotations, AnnotationChatHolder)
		return nil, nil
	})
}

// errNoChange ends a change that has nothing to write.
var errNoChange = errors.New("nothing to change")

// change applies fn to the metadata of session id's Secret and writes
// what it changed of the annotations, and the data fn returns (nil:
// none), as a merge patch that names the version it read: another
// writer's change between the read and the write makes it read again.
func (s *SecretSessions) change(ctx context.Context, id string, fn func(*metav1.ObjectMeta, int64) ([]byte, error)) error {
	for range 10 {
		meta, gen, err := s.get(ctx, id)
		if err != nil {
			return err
		}
		was := maps.Clone(meta.Annotations)
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		data, err := fn(meta, gen)
		if errors.Is(err, errNoChange) {
			return nil
		} else if err != nil {
			return err
		}
		ann := map[string]any{}
		for k, v := range meta.Annotations {
			if old, had := was[k]; !had || old != v {
				ann[k] = v
			}
		}
		for k := range was {
			if _, has := meta.Annotations[k]; !has {
				ann[k] = nil
			}
		}
		patch := map[string]any{"metadata": map[string]any{"resourceVersion": meta.ResourceVersion, "annotations": ann}}
		if data != nil {
			patch["data"] = map[string][]byte{chatFile: data}
		}
		body, _ := json.Marshal(patch)
		_, err = s.Core.CoreV1().Secrets(s.Namespace).Patch(ctx, meta.Name, types.MergePatchType, body, metav1.PatchOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if apierrors.IsNotFound(err) {
			return errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s is not in the cluster", id))
		}
		if err != nil {
			return explain(err, "patch", "secrets", s.Namespace)
		}
		return nil
	}
	return errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s's Secret changed under every one of 10 tries to write it", id))
}

// Load returns session id's file and its generation.
func (s *SecretSessions) Load(ctx context.Context, id string) ([]byte, int64, error) {
	sec, err := s.Core.CoreV1().Secrets(s.Namespace).Get(ctx, ChatSecretName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s is not in the cluster", id))
	}
	if err != nil {
		return nil, 0, explain(err, "get", "secrets", s.Namespace)
	}
	gen, err := s.check(&sec.ObjectMeta, id)
	if err != nil {
		return nil, 0, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(sec.Data[chatFile]))
	if err != nil {
		return nil, 0, errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s's Secret %s/%s is damaged: %v", id, s.Namespace, sec.Name, err))
	}
	data, err := io.ReadAll(io.LimitReader(zr, int64(maxChatFile)+1))
	if err == nil && len(data) > maxChatFile {
		err = fmt.Errorf("more than %d MiB", maxChatFile>>20)
	}
	if err != nil {
		return nil, 0, errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s's Secret %s/%s is damaged: %v", id, s.Namespace, sec.Name, err))
	}
	return data, gen, nil
}

// Save stores file as session id in place of generation gen, and ends
// this replica's hold.
func (s *SecretSessions) Save(ctx context.Context, id string, file, info []byte, gen int64) (int64, error) {
	if len(info) > maxChatInfo {
		return 0, errdefs.New(errdefs.Invalid, fmt.Sprintf("session %s's description is %d bytes, more than %d", id, len(info), maxChatInfo))
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(file)
	zw.Close()
	if buf.Len() > MaxChatStored || len(file) > maxChatFile {
		why := fmt.Sprintf("it is %d KiB compressed (%d MiB), more than the %d KiB (%d MiB) the cluster keeps of a session", buf.Len()>>10, len(file)>>20, MaxChatStored>>10, maxChatFile>>20)
		if gen > 0 {
			// No later change could be saved either: refuse them before
			// they run (the Secret keeps the last save).
			s.change(ctx, id, func(meta *metav1.ObjectMeta, g int64) ([]byte, error) {
				if g != gen {
					return nil, errNoChange
				}
				meta.Annotations[AnnotationChatFull] = "its last save was refused: " + why
				var h chatHold
				if json.Unmarshal([]byte(meta.Annotations[AnnotationChatHolder]), &h) == nil && h.Who == s.Who {
					delete(meta.Annotations, AnnotationChatHolder)
				}
				return nil, nil
			})
		}
		return 0, errdefs.New(errdefs.TooLarge, fmt.Sprintf("session %s cannot be saved: %s", id, why))
	}
	secrets := s.Core.CoreV1().Secrets(s.Namespace)
	if gen == 0 {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ChatSecretName(id), Namespace: s.Namespace,
			Labels:      map[string]string{LabelManaged: managedBy, LabelChat: "true"},
			Annotations: map[string]string{AnnotationChatID: id, AnnotationChatGeneration: "1", AnnotationChatInfo: string(info)}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{chatFile: buf.Bytes()}}
		_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return 0, errdefs.New(errdefs.Busy, fmt.Sprintf("session %s was saved through another replica first", id))
		}
		if err != nil {
			return 0, explain(err, "create", "secrets", s.Namespace)
		}
		return 1, nil
	}
	var next int64
	err := s.change(ctx, id, func(meta *metav1.ObjectMeta, g int64) ([]byte, error) {
		if who := s.heldByOther(meta); who != "" {
			return nil, busy(id, who)
		}
		if g != gen {
			return nil, errdefs.New(errdefs.Busy, fmt.Sprintf("session %s was changed through another replica meanwhile (generation %d, not %d)", id, g, gen))
		}
		next = g + 1
		meta.Annotations[AnnotationChatGeneration] = strconv.FormatInt(next, 10)
		meta.Annotations[AnnotationChatInfo] = string(info)
		delete(meta.Annotations, AnnotationChatHolder)
		return buf.Bytes(), nil
	})
	if errdefs.IsNotFound(err) {
		return 0, errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s was removed through another replica meanwhile", id))
	}
	return next, err
}

// List returns the description of each session the namespace holds.
func (s *SecretSessions) List(ctx context.Context) (map[string][]byte, error) {
	opts := metav1.ListOptions{LabelSelector: LabelChat + "=true"}
	var metas []metav1.ObjectMeta
	if s.Meta != nil {
		l, err := s.Meta.Resource(secretsResource).Namespace(s.Namespace).List(ctx, opts)
		if err != nil {
			return nil, explain(err, "list", "secrets", s.Namespace)
		}
		for _, pm := range l.Items {
			metas = append(metas, pm.ObjectMeta)
		}
	} else {
		l, err := s.Core.CoreV1().Secrets(s.Namespace).List(ctx, opts)
		if err != nil {
			return nil, explain(err, "list", "secrets", s.Namespace)
		}
		for _, sec := range l.Items {
			metas = append(metas, sec.ObjectMeta)
		}
	}
	out := map[string][]byte{}
	for _, m := range metas {
		id := m.Annotations[AnnotationChatID]
		if id == "" || m.Name != ChatSecretName(id) {
			continue // not a session's, whatever its label says
		}
		out[id] = []byte(m.Annotations[AnnotationChatInfo])
	}
	return out, nil
}

// Delete removes session id, unless another replica holds it.
func (s *SecretSessions) Delete(ctx context.Context, id string) error {
	sec, _, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	if who := s.heldByOther(sec); who != "" {
		return busy(id, who)
	}
	err = s.Core.CoreV1().Secrets(s.Namespace).Delete(ctx, sec.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &sec.UID, ResourceVersion: &sec.ResourceVersion}})
	switch {
	case apierrors.IsNotFound(err):
		return errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s is not in the cluster", id))
	case apierrors.IsConflict(err):
		return errdefs.New(errdefs.Busy, fmt.Sprintf("session %s changed while it was being removed; retry", id))
	case err != nil:
		return explain(err, "delete", "secrets", s.Namespace)
	}
	return nil
}
