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
	"os"
	"strconv"
	"time"

	"github.com/klauspost/compress/gzip"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
	Core      kubernetes.Interface
	Namespace string
	// Who is this replica, in holds.
	Who string
	// now is the clock (tests).
	now func() time.Time
}

// SecretSessionsFromEnv is the store EnvChatSessions turns on, reached
// as kube mode reaches its cluster (kube.kubeconfig, kube.namespace);
// nil when it is off.
func SecretSessionsFromEnv() (*SecretSessions, error) {
	on, err := strconv.ParseBool(cmp.Or(os.Getenv(EnvChatSessions), "false"))
	if err != nil {
		return nil, errdefs.New(errdefs.Invalid, fmt.Sprintf("kube.chat_sessions %q: not true or false", os.Getenv(EnvChatSessions)))
	}
	if !on {
		return nil, nil
	}
	ns := Config{Namespace: os.Getenv(EnvNamespace)}.Defaults().Namespace
	rc, err := RESTConfig(os.Getenv(EnvKubeconfig))
	if err != nil {
		return nil, fmt.Errorf("kube.chat_sessions: %w", err)
	}
	rc.Timeout = 30 * time.Second
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube.chat_sessions: %w", err)
	}
	return NewSecretSessions(core, ns), nil
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

// get reads session id's Secret: NOT_FOUND when there is none, or one
// that is not id's.
func (s *SecretSessions) get(ctx context.Context, id string) (*corev1.Secret, int64, error) {
	sec, err := s.Core.CoreV1().Secrets(s.Namespace).Get(ctx, ChatSecretName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s is not in the cluster", id))
	}
	if err != nil {
		return nil, 0, explain(err, "get", "secrets", s.Namespace)
	}
	if sec.Labels[LabelChat] != "true" || sec.Annotations[AnnotationChatID] != id {
		return nil, 0, errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s is not in the cluster (Secret %s/%s is not its)", id, s.Namespace, sec.Name))
	}
	gen, err := strconv.ParseInt(sec.Annotations[AnnotationChatGeneration], 10, 64)
	if err != nil || gen < 1 {
		return nil, 0, errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s's Secret %s/%s is damaged: generation %q", id, s.Namespace, sec.Name, sec.Annotations[AnnotationChatGeneration]))
	}
	return sec, gen, nil
}

// heldByOther reports who else holds sec now ("": no one).
func (s *SecretSessions) heldByOther(sec *corev1.Secret) string {
	var h chatHold
	raw := sec.Annotations[AnnotationChatHolder]
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
	err := s.change(ctx, id, func(sec *corev1.Secret, g int64) error {
		if who := s.heldByOther(sec); who != "" {
			return busy(id, who)
		}
		if full := sec.Annotations[AnnotationChatFull]; full != "" {
			return errdefs.New(errdefs.TooLarge, fmt.Sprintf("session %s takes no more changes: %s; start a new session", id, full))
		}
		h, _ := json.Marshal(chatHold{Who: s.Who, Until: s.clock().Add(chatHoldFor).UTC()})
		sec.Annotations[AnnotationChatHolder] = string(h)
		gen = g
		return nil
	})
	return gen, err
}

// Release ends this replica's hold of session id.
func (s *SecretSessions) Release(ctx context.Context, id string) error {
	return s.change(ctx, id, func(sec *corev1.Secret, _ int64) error {
		var h chatHold
		raw, has := sec.Annotations[AnnotationChatHolder]
		if !has || json.Unmarshal([]byte(raw), &h) == nil && h.Who != s.Who {
			return errNoChange // none, or another's
		}
		delete(sec.Annotations, AnnotationChatHolder)
		return nil
	})
}

// errNoChange ends a change that has nothing to write.
var errNoChange = errors.New("nothing to change")

// change applies fn to session id's Secret and writes it, reading it
// again when another writer changed it between (the update names the
// version it read).
func (s *SecretSessions) change(ctx context.Context, id string, fn func(*corev1.Secret, int64) error) error {
	for range 10 {
		sec, gen, err := s.get(ctx, id)
		if err != nil {
			return err
		}
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		if err := fn(sec, gen); errors.Is(err, errNoChange) {
			return nil
		} else if err != nil {
			return err
		}
		_, err = s.Core.CoreV1().Secrets(s.Namespace).Update(ctx, sec, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return explain(err, "update", "secrets", s.Namespace)
		}
		return nil
	}
	return errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s's Secret changed under every one of 10 tries to write it", id))
}

// Load returns session id's file and its generation.
func (s *SecretSessions) Load(ctx context.Context, id string) ([]byte, int64, error) {
	sec, gen, err := s.get(ctx, id)
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
			s.change(ctx, id, func(sec *corev1.Secret, g int64) error {
				if g != gen {
					return errNoChange
				}
				sec.Annotations[AnnotationChatFull] = "its last save was refused: " + why
				var h chatHold
				if json.Unmarshal([]byte(sec.Annotations[AnnotationChatHolder]), &h) == nil && h.Who == s.Who {
					delete(sec.Annotations, AnnotationChatHolder)
				}
				return nil
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
	err := s.change(ctx, id, func(sec *corev1.Secret, g int64) error {
		if who := s.heldByOther(sec); who != "" {
			return busy(id, who)
		}
		if g != gen {
			return errdefs.New(errdefs.Busy, fmt.Sprintf("session %s was changed through another replica meanwhile (generation %d, not %d)", id, g, gen))
		}
		next = g + 1
		sec.Annotations[AnnotationChatGeneration] = strconv.FormatInt(next, 10)
		sec.Annotations[AnnotationChatInfo] = string(info)
		delete(sec.Annotations, AnnotationChatHolder)
		sec.Data = map[string][]byte{chatFile: buf.Bytes()}
		return nil
	})
	if errdefs.IsNotFound(err) {
		return 0, errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s was removed through another replica meanwhile", id))
	}
	return next, err
}

// List returns the description of each session the namespace holds.
func (s *SecretSessions) List(ctx context.Context) (map[string][]byte, error) {
	l, err := s.Core.CoreV1().Secrets(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=true"})
	if err != nil {
		return nil, explain(err, "list", "secrets", s.Namespace)
	}
	out := map[string][]byte{}
	for _, sec := range l.Items {
		id := sec.Annotations[AnnotationChatID]
		if id == "" || sec.Name != ChatSecretName(id) {
			continue // not a session's, whatever its label says
		}
		out[id] = []byte(sec.Annotations[AnnotationChatInfo])
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
