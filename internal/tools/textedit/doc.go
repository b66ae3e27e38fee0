// Package textedit is the pure text logic behind the agent tools read and
// edit: exact string replacement that a model can drive reliably (Apply),
// cat -n style rendering of a file for the model to read (Format), and the
// binary-file check that keeps bytes out of a model's context (IsBinary,
// DescribeBinary).
//
// Everything here works on byte slices and strings the caller already holds.
// The package must not do I/O of any kind (no files, no environment, no
// system MIME tables), must not log, and must not panic on any input: the
// content comes from an agent's file system and the edits from a model.
//
// Errors are written for a model to act on: they say which edit failed, why,
// and what text would have matched.
package textedit
