"""ctxrecover: recover long LLM agent sessions without losing the conversation."""
