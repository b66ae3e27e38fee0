// Package openai is the llm.Provider for OpenAI's Chat Completions API and
// every server that speaks it: Ollama, vLLM, LM Studio, SGLang, Grok (xAI),
// Mistral, or any other "openai-compatible" base URL.
//
// It streams with github.com/openai/openai-go/v3, assembles tool calls whose
// JSON arrives in pieces, and does its own retries (the SDK's are off) so
// that nothing is retried once output has reached the caller.
//
// It must not read any OPENAI_* variable other than the key variable the
// configuration names, and it never logs or returns the key.
package openai
