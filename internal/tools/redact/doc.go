// Package redact masks secrets in tool output before the output reaches a
// model or is written to a stored session.
//
// A Redactor masks two things: values registered with AddSecret (the
// neuron's injected credentials, say), shown as [REDACTED:<name>], and text
// that looks like a well-known credential (cloud keys, API tokens, private
// key blocks, JWTs, Authorization headers, passwords in URLs), shown as
// [REDACTED:<kind>]. Overlapping matches are merged so no fragment of a
// secret survives beside a mask.
//
// It is a last line of defence with a bias against false positives: the
// patterns are anchored on vendor prefixes or on an explicit label, and text
// without any of their cheap anchors is returned untouched (the same string,
// no allocation).
//
// What it must not do: it must not log, store or return the values it was
// given (error messages name the secret, never its value); it must not alter
// output that holds no secret; and it is not a guarantee — a secret that was
// never registered and matches no pattern passes through, so callers must
// still keep credentials out of the environment the model can read.
package redact
