// Package gemini is the llm.Provider for Google's Gemini API, on
// google.golang.org/genai: streamed text, thinking and function calls,
// usage, stop reasons, retries that stop once output reached the caller,
// and exact input counts from the countTokens endpoint.
//
// Gemini sends each function call whole, so tool_start, one tool_delta with
// the whole input and tool_end arrive together. Calls the API leaves
// without an id get one here ("gemini_call_N", stable within the
// response); such ids are never sent back, since Gemini matches function
// responses by name.
//
// Thought signatures, which Gemini requires back on the parts that carried
// them, travel in llm.Part.Signature (base64) beside the part's text,
// thinking or tool call.
//
// It reads no GOOGLE_* configuration but the key variable; the key is never
// logged or returned.
package gemini
