"""Chat models: the `ChatModel` protocol, its request/response types, and `resolve_model`.

`memproc.llm` (not `memproc.models`, which is the Django models module) is where a model comes from:
`resolve_model("openai/gpt-4o-mini")`, `resolve_model("local/echo")`, or any object with `generate`.
"""

from memproc.llm.registry import register_provider, resolve_model
from memproc.llm.types import ChatModel, ModelRequest, ModelResponse, StreamingChatModel, ToolCall, ToolSpec

__all__ = [
    "ChatModel",
    "ModelRequest",
    "ModelResponse",
    "StreamingChatModel",
    "ToolCall",
    "ToolSpec",
    "register_provider",
    "resolve_model",
]
