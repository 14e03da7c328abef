"""EchoModel: the offline development model that shows what memory put in front of it."""

from __future__ import annotations

from memproc.llm import ModelRequest, ToolSpec
from memproc.llm.local import DEFAULT_WORKING_MEMORY_TEMPLATE, EchoModel
from memproc.messages import Message, ToolCallPart, ToolResultPart
from memproc.processors.working_memory import DEFAULT_TEMPLATE, TOOL_NAME
from memproc.services.titles import TITLE_INSTRUCTIONS
from memproc.tools import WORKING_MEMORY_TOOL

UPDATE_TOOL = ToolSpec(
    name="updateWorkingMemory",
    description="Update the working memory",
    parameters={"type": "object", "properties": {"memory": {"type": "string"}}, "required": ["memory"]},
)


def system(text: str) -> Message:
    return Message.create("system", text)


def user(text: str) -> Message:
    return Message.create("user", text)


def assistant(text: str) -> Message:
    return Message.create("assistant", text)


def working_memory(data: str = "") -> Message:
    return system(
        f"Use updateWorkingMemory to keep this current.\n<working_memory>\n{data}\n</working_memory>"
    )


def history(n: int) -> list[Message]:
    return [user(f"question {i}") if i % 2 == 0 else assistant(f"answer {i}") for i in range(n)]


def test_echoes_the_last_user_message():
    response = EchoModel().generate(
        ModelRequest(messages=[user("first"), assistant("ok"), user("Hello, memproc!")])
    )

    assert response.text.startswith("Echo: Hello, memproc! [context:")
    assert response.tool_calls == []
    assert response.finish_reason == "stop"


def test_is_deterministic():
    request = ModelRequest(messages=[working_memory(), user("My name is Ada")], tools=[UPDATE_TOOL])

    assert EchoModel().generate(request) == EchoModel().generate(request)


def test_reports_what_memory_put_in_the_prompt():
    recall = system(
        "Remembered from another conversation:\n"
        "- [2024-05-01] user: I adopted a cat named Miso\n"
        "- [2024-05-01] assistant: Congratulations on Miso!"
    )
    messages = [
        system("You are helpful."),
        working_memory("- **Name**: Ada"),
        recall,
        *history(7),
        user("Hi"),
    ]

    text = EchoModel().generate(ModelRequest(messages=messages)).text

    assert text == "Echo: Hi [context: 3 system, 7 history messages; recalled: 2; working memory: yes]"


def test_reports_no_working_memory_and_no_recall_when_absent():
    text = EchoModel().generate(ModelRequest(messages=[user("Hi")])).text

    assert text == "Echo: Hi [context: 0 system, 0 history messages; recalled: 0; working memory: no]"


def test_counts_same_thread_recalled_messages_marked_in_metadata():
    recalled = Message.create("user", "old detail", metadata={"recalled": True})

    text = EchoModel().generate(ModelRequest(messages=[recalled, assistant("ok"), user("Hi")])).text

    assert "2 history messages; recalled: 1;" in text


def test_usage_counts_words():
    response = EchoModel().generate(ModelRequest(messages=[system("Be brief."), user("one two three")]))

    completion = len(response.text.split())
    assert response.usage == {
        "prompt_tokens": 5,
        "completion_tokens": completion,
        "total_tokens": 5 + completion,
    }


# --- working memory -------------------------------------------------------------------------------


def test_states_a_name_then_calls_the_working_memory_tool_with_the_filled_template():
    request = ModelRequest(
        messages=[working_memory(), user("Hi! My name is Ada Lovelace.")], tools=[UPDATE_TOOL]
    )

    response = EchoModel().generate(request)

    assert response.text == ""
    assert response.finish_reason == "tool_calls"
    [call] = response.tool_calls
    assert call.name == "updateWorkingMemory"
    memory = call.args["memory"]
    assert "- **First Name**: Ada\n" in memory
    assert "- **Last Name**: Lovelace\n" in memory
    assert memory.startswith("# User Information")
    assert memory.count("\n") == DEFAULT_WORKING_MEMORY_TEMPLATE.count("\n")


def test_answers_with_text_after_the_tool_result():
    model = EchoModel()
    first = [working_memory(), user("I live in Lisbon")]
    call = model.generate(ModelRequest(messages=first, tools=[UPDATE_TOOL])).tool_calls[0]
    turn = [
        *first,
        Message.create("assistant", [ToolCallPart(call.id, call.name, call.args)]),
        Message.create("tool", [ToolResultPart(call.id, call.name, {"success": True})]),
    ]

    response = model.generate(ModelRequest(messages=turn, tools=[UPDATE_TOOL]))

    assert response.tool_calls == []
    assert response.text.startswith("Echo: I live in Lisbon [context:")
    assert response.text.endswith("[working memory updated]")


def test_never_calls_the_tool_twice_in_one_turn():
    call = ToolCallPart("call_1", "updateWorkingMemory", {"memory": "- **Name**: Ada"})
    pending = [working_memory(), user("My name is Ada"), Message.create("assistant", [call])]

    response = EchoModel().generate(ModelRequest(messages=pending, tools=[UPDATE_TOOL]))

    assert response.tool_calls == []
    assert response.text.startswith("Echo: My name is Ada")


def test_a_failed_update_is_reported_not_retried():
    call = ToolCallPart("call_1", "updateWorkingMemory", {"memory": "x"})
    result = ToolResultPart("call_1", "updateWorkingMemory", "refused", is_error=True)
    turn = [
        working_memory(),
        user("My name is Ada"),
        Message.create("assistant", [call]),
        Message.create("tool", [result]),
    ]

    response = EchoModel().generate(ModelRequest(messages=turn, tools=[UPDATE_TOOL]))

    assert response.tool_calls == []
    assert response.text.endswith("[working memory update failed]")


def test_a_new_turn_may_update_again():
    old_call = ToolCallPart("call_1", "updateWorkingMemory", {"memory": "- **Name**: Ada"})
    messages = [
        working_memory("# User\n- **Name**: Ada\n- **Location**:"),
        user("My name is Ada"),
        Message.create("assistant", [old_call]),
        Message.create("tool", [ToolResultPart("call_1", "updateWorkingMemory", "ok")]),
        assistant("Nice to meet you"),
        user("I live in Porto"),
    ]

    [call] = EchoModel().generate(ModelRequest(messages=messages, tools=[UPDATE_TOOL])).tool_calls

    assert call.args == {"memory": "# User\n- **Name**: Ada\n- **Location**: Porto"}


def test_does_not_call_the_tool_when_nothing_changes():
    request = ModelRequest(
        messages=[working_memory("- **Location**: Lisbon"), user("I live in Lisbon.")], tools=[UPDATE_TOOL]
    )

    assert EchoModel().generate(request).tool_calls == []


def test_does_not_call_the_tool_when_it_is_not_offered():
    response = EchoModel().generate(ModelRequest(messages=[working_memory(), user("My name is Ada")]))

    assert response.tool_calls == []
    assert response.text.startswith("Echo: My name is Ada")


def test_does_not_call_the_tool_for_small_talk():
    request = ModelRequest(messages=[working_memory(), user("What's the weather like?")], tools=[UPDATE_TOOL])

    assert EchoModel().generate(request).tool_calls == []


def test_leaves_schema_mode_working_memory_alone():
    schema_tool = ToolSpec(
        name="updateWorkingMemory",
        description="Merge into working memory",
        parameters={"type": "object", "properties": {"memory": {"type": "object"}}},
    )
    request = ModelRequest(messages=[working_memory("{}"), user("My name is Ada")], tools=[schema_tool])

    assert EchoModel().generate(request).tool_calls == []


def test_fills_each_kind_of_fact_into_existing_data():
    current = "# User\n- **Name**: Ada\n- **Location**: \n- **Occupation**:\n- **Facts**: likes tea"
    text = "I live in Paris, France and I work as a mathematician. Remember that I prefer mornings!"

    [call] = (
        EchoModel()
        .generate(ModelRequest(messages=[working_memory(current), user(text)], tools=[UPDATE_TOOL]))
        .tool_calls
    )

    assert call.args["memory"] == (
        "# User\n- **Name**: Ada\n- **Location**: Paris, France\n- **Occupation**: mathematician\n"
        "- **Facts**: likes tea; I prefer mornings"
    )


def test_i_am_a_sets_the_occupation():
    request = ModelRequest(messages=[working_memory(), user("I'm a nurse")], tools=[UPDATE_TOOL])

    [call] = EchoModel().generate(request).tool_calls

    assert "- **Occupation**: nurse\n" in call.args["memory"]


def test_uses_the_prompts_template_when_working_memory_is_empty():
    prompt = system(
        "<working_memory_template>\n# Profile\n- **Name**:\n- **Location**:\n</working_memory_template>\n"
        "<working_memory></working_memory>"
    )

    [call] = (
        EchoModel()
        .generate(ModelRequest(messages=[prompt, user("my name is Grace Hopper")], tools=[UPDATE_TOOL]))
        .tool_calls
    )

    assert call.args["memory"] == "# Profile\n- **Name**: Grace Hopper\n- **Location**:"


def test_adds_a_line_the_template_lacks():
    [call] = (
        EchoModel()
        .generate(
            ModelRequest(
                messages=[working_memory("# Notes"), user("Remember that the launch is on Friday")],
                tools=[UPDATE_TOOL],
            )
        )
        .tool_calls
    )

    assert call.args["memory"] == "# Notes\n- **Facts**: the launch is on Friday"


# --- streaming ------------------------------------------------------------------------------------


def test_stream_yields_word_sized_deltas_then_finish():
    request = ModelRequest(messages=[system("Be brief."), user("stream this please")])
    expected = EchoModel().generate(request)

    events = list(EchoModel().stream(request))

    deltas = [e for e in events if e.type == "text-delta"]
    assert "".join(e.text for e in deltas) == expected.text
    assert all(len(e.text.split()) == 1 for e in deltas)
    assert len(deltas) == len(expected.text.split())
    assert events[-1].type == "finish"
    assert events[-1].usage == expected.usage
    assert events[-1].finish_reason == "stop"


def test_stream_yields_the_working_memory_tool_call():
    request = ModelRequest(messages=[working_memory(), user("My name is Ada")], tools=[UPDATE_TOOL])

    events = list(EchoModel().stream(request))

    assert [e.type for e in events] == ["tool-call", "finish"]
    assert events[0].tool_call.name == "updateWorkingMemory"
    assert events[1].finish_reason == "tool_calls"


def test_calls_the_tool_the_working_memory_processor_offers_and_starts_from_its_template():
    assert TOOL_NAME == WORKING_MEMORY_TOOL == UPDATE_TOOL.name
    assert DEFAULT_WORKING_MEMORY_TEMPLATE == DEFAULT_TEMPLATE


def titled(first_message: str) -> str:
    request = ModelRequest(messages=[system(TITLE_INSTRUCTIONS), user(first_message)])
    return EchoModel().generate(request).text


def test_offline_titles_end_at_the_first_clause_and_never_dangle():
    assert titled("My name is Ada and I live in Lisbon, where I work as a biologist.") == (
        "My name is Ada and I live in Lisbon"
    )
    assert titled("Where do I live and what is my job?") == "Where do I live and what is my job"
    assert titled("one two three four five six seven eight nine and ten more") == (
        "One two three four five six seven eight nine"
    )
    assert titled("hello") == "Hello"
    assert titled("...") == "New conversation"
    assert titled("plan a trip to the") == "Plan a trip"
