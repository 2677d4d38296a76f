"""Provider stream grammars reasonwire understands (the ``rw-provider`` header values).

A grammar names a wire format, not a vendor: Gemini has two (generateContent
chunks and Interactions step events) and each needs its own translator, and one
format (Chat Completions) is spoken by many providers, told apart by the issuer's
``provider``.
"""

from enum import StrEnum


class Grammar(StrEnum):
    """The wire grammar of one provider stream; the value is its stable wire name."""

    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC_MESSAGES = "anthropic-messages"
    GEMINI_GENERATE_CONTENT = "gemini-generate-content"
    GEMINI_INTERACTIONS = "gemini-interactions"
    BEDROCK_CONVERSE = "bedrock-converse"
    OPENAI_CHAT_COMPLETIONS = "openai-chat-completions"
    """OpenAI Chat Completions chunks as open-model servers stream them (DeepSeek, vLLM, SGLang,
    OpenRouter, Mistral, …) and Ollama's ``/api/chat`` lines; the provider behind a run is its
    issuer's :attr:`~reasonwire.contracts.artefacts.Issuer.provider` (``contracts/issuers.py``)."""

    @property
    def provider_name(self) -> str:
        """The OTel GenAI ``gen_ai.provider.name`` / AG-UI ``TokenUsage.provider`` label."""
        return _PROVIDER_NAMES[self]


_PROVIDER_NAMES = {
    Grammar.OPENAI_RESPONSES: "openai",
    Grammar.ANTHROPIC_MESSAGES: "anthropic",
    Grammar.GEMINI_GENERATE_CONTENT: "gcp.gemini",
    Grammar.GEMINI_INTERACTIONS: "gcp.gemini",
    Grammar.BEDROCK_CONVERSE: "aws.bedrock",
    Grammar.OPENAI_CHAT_COMPLETIONS: "openai",
}
