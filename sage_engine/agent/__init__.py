"""SAGE's own agent loop: retrieve rules, write a kernel with a model,
evaluate it, iterate, record the lesson and the adoptions; run whole suites
resumably and report the paper's metrics.

The loop uses the Engine exactly as an MCP client would, so what it learns
is what any agent would teach the memory.
"""

from sage_engine.agent.abstraction import LLMAbstractor, check_drift
from sage_engine.agent.costs import parse_price
from sage_engine.agent.llm import LLM, AnthropicLLM, LLMError, OpenAICompatLLM, Response, ToolCall, ToolSpec, Usage, make_llm
from sage_engine.agent.loop import AgentSettings, solve_task
from sage_engine.agent.report import compare_markdown, compute_metrics, write_report
from sage_engine.agent.runner import Runner, new_settings, preview_prompts, select_tasks
from sage_engine.agent.state import RunSettings, RunState, TaskRecord
from sage_engine.agent.strategies import STRATEGIES, get_strategy, strategy_config

__all__ = [
    "LLM",
    "AgentSettings",
    "AnthropicLLM",
    "LLMAbstractor",
    "LLMError",
    "OpenAICompatLLM",
    "Response",
    "RunSettings",
    "RunState",
    "Runner",
    "STRATEGIES",
    "TaskRecord",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "check_drift",
    "compare_markdown",
    "compute_metrics",
    "get_strategy",
    "make_llm",
    "new_settings",
    "parse_price",
    "preview_prompts",
    "select_tasks",
    "solve_task",
    "strategy_config",
    "write_report",
]
