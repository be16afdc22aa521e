#!/usr/bin/env python3
"""Regenerates tests/data/chat/expected.json: reference renderings of the real chat templates in
tests/data/chat/*.jinja, which flashkit's C++ Jinja interpreter must reproduce byte for byte.

By default the templates are rendered with Python's jinja2 set up the way Hugging Face transformers sets it up
for apply_chat_template (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension, transformers' own `tojson` filter, and the `raise_exception` / `strftime_now` globals;
rendered with messages, tools=None, documents=None, add_generation_prompt and the special tokens).
With --use-transformers the renderings come from transformers' own chat-template code instead (to confirm
that this set-up matches it); the output must then be identical.

Debian: apt-get install -y python3-jinja2, then
    /usr/bin/python3 tools/chat/render_expected.py            # writes tests/data/chat/expected.json
    /usr/bin/python3 tools/chat/render_expected.py --check    # fails if expected.json is out of date
"""
import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "chat"

# Special tokens each family's tokenizer_config.json declares (bos may be absent: Qwen has none).
TOKENS = {
    "gemma3.jinja": ("<bos>", "<end_of_turn>"),
    "gemma2.jinja": ("<bos>", "<eos>"),
    "llama3.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5.jinja": ("", "<|im_end|>"),
    "qwen3.jinja": ("", "<|im_end|>"),
}


def m(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


# Conversations shared by every template.
CONVERSATIONS = {
    "single_user": [m("user", "Hello!")],
    "system_user": [m("system", "You are a helpful assistant."), m("user", "What is 2+2?")],
    "multi_turn": [
        m("user", "Hi there"),
        m("assistant", "Hello! How can I help you today?"),
        m("user", "Tell me a joke."),
    ],
    "system_multi_turn": [
        m("system", "Answer briefly.\nUse metric units."),
        m("user", "How tall is Mont Blanc?"),
        m("assistant", "About 4806 m."),
        m("user", "And Everest?"),
    ],
    "ends_with_assistant": [m("user", "Say yes."), m("assistant", "Yes.")],
    "whitespace_unicode": [
        m("system", "  Leading spaces and a trailing newline\n"),
        m("user", "\n\tGrüße, 世界! 👋 — «quotes» \"double\" 'single' \\backslash\u00a0\n\nline two  "),
        m("assistant", " résumé naïve café \u3000"),
        m("user", "{{ not a template }} {% neither %} <|eot_id|>"),
    ],
    "empty_content": [m("user", "")],
}

# Conversations only some templates accept, and the ones that must raise.
EXTRA = {
    "gemma3.jinja": {
        "bad_alternation": [m("user", "one"), m("user", "two")],
        "assistant_first": [m("assistant", "I speak first")],
    },
    "gemma2.jinja": {
        "bad_alternation": [m("user", "one"), m("assistant", "two"), m("assistant", "three")],
    },
    "qwen3.jinja": {
        "thinking_history": [
            m("user", "What is 3*7?"),
            m("assistant", "<think>\n3 times 7 is 21.\n</think>\n\nIt is 21."),
            m("user", "And 3*8?"),
        ],
        "reasoning_field": [
            m("user", "Q1"),
            m("assistant", "A1", reasoning_content="thought about Q1"),
            m("user", "Q2"),
            m("assistant", "\n\nA2", reasoning_content="\nthought about Q2\n"),
        ],
    },
}

# Extra keyword arguments (transformers passes these through to the template).
KWARGS = {
    "llama3.1.jinja": [{}, {"date_string": "30 Nov 2026"}],
    # Llama 3.2 falls back to strftime_now when date_string is absent: pin the date for reproducibility.
    "llama3.2.jinja": [{"date_string": "26 Jul 2024"}],
    "qwen3.jinja": [{}, {"enable_thinking": False}],
}

# Cases whose conversation the template rejects with raise_exception.
EXPECT_ERROR = {
    ("gemma3.jinja", "bad_alternation"),
    ("gemma3.jinja", "assistant_first"),
    ("gemma2.jinja", "bad_alternation"),
    ("gemma2.jinja", "system_user"),
    ("gemma2.jinja", "system_multi_turn"),
    ("gemma2.jinja", "whitespace_unicode"),
}


# Small templates exercising the interpreter feature by feature: (name, template, variables). Rendered the same
# way (transformers' environment); a None output means the template must raise.
FEATURES = [
    ("text_only", "plain text\n", {}),
    ("trailing_newlines", "a\n\n", {}),
    ("var_none_bool_num", "{{ none }}|{{ true }}|{{ 3 }}|{{ 2.5 }}|{{ 1e3 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}", {}),
    ("undefined_renders_empty", "[{{ nothing }}][{{ d.missing }}][{{ d['missing'] }}][{{ l[10] }}]", {"d": {"a": 1}, "l": [1]}),
    ("strings_escapes", "{{ 'a\\nb' }}|{{ \"q\\\"q\" }}|{{ 'tab\\there' }}|{{ '\\u00e9\\x41' }}|{{ 'ab' 'cd' }}", {}),
    ("concat_tilde", "{{ 'n=' ~ 3 ~ none ~ true }}|{{ 'a' + 'b' }}|{{ [1] + [2, 3] }}|{{ 'ab' * 3 }}", {}),
    ("list_dict_repr", "{{ [1, 'a', none, true, 2.0] }}|{{ {'k': 'v', 'n': [1]} }}|{{ ('x', \"it's\") }}", {}),
    ("compare_logic", "{{ 1 < 2 < 3 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ not 0 }}{{ 0 or 'x' }}{{ 1 and 'y' }}{{ none or [] }}", {}),
    ("in_not_in", "{{ 'b' in 'abc' }}{{ 2 in [1,2] }}{{ 'k' in d }}{{ 'z' not in d }}{{ 'x' not in 'xyz' }}", {"d": {"k": 1}}),
    ("cond_expr", "{{ 'yes' if x else 'no' }}|{{ 'yes' if not x else 'no' }}|{{ 'only' if false }}|", {"x": 1}),
    ("if_elif_else", "{% for v in [1, 2, 3, 4] %}{% if v == 1 %}one{% elif v == 2 %}two{% elif v is even %}even{% else %}odd{% endif %},{% endfor %}", {}),
    ("loop_vars", "{% for x in ['a','b','c'] %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.cycle('o','e') }};{% endfor %}", {}),
    ("loop_prev_next", "{% for x in [1,2,3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}", {}),
    ("loop_else_filter", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in range(10) if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}", {}),
    ("loop_dict_items_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for a, b in d | items %}{{ a }}{{ b }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("nested_loops", "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}", {}),
    ("set_scoping", "{% set x = 1 %}{% for i in [1,2] %}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 5 %}{% endif %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for m in [1,2,3] %}{% if m > 1 %}{% set ns.found = true %}{% set ns.n = ns.n + m %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}", {}),
    ("set_tuple_and_block", "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set blk %}in {{ a }} block{% endset %}[{{ blk }}]", {}),
    ("slices", "{{ l[1:] }}{{ l[:-1] }}{{ l[::-1] }}{{ l[::2] }}{{ s[1:3] }}{{ s[::-1] }}{{ l[-1] }}{{ s[0] }}", {"l": [1, 2, 3, 4], "s": "héllo"}),
    ("attr_vs_item", "{{ m.role }}{{ m['content'] }}{{ m.get('role') }}{{ m.get('x', 'dflt') }}{{ m.get('x') }}{{ m.items() | list | length }}", {"m": {"role": "user", "content": "hi"}}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}{{ d is mapping }}{{ l is iterable }}{{ 's' is iterable }}{{ l is sequence }}{{ 3 is divisibleby 3 }}{{ 4 is divisibleby(3) }}{{ x is not none }}{{ true is true }}{{ false is false }}{{ 1 is true }}{{ 'A' is upper }}{{ 'a' is lower }}{{ x is sameas 1 }}{{ 3 is in [3] }}{{ 2 is eq 2 }}{{ 5 is gt 4 }}", {"x": 1, "d": {}, "l": [1]}),
    ("string_methods", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ s.strip(' x') }}][{{ 'a,b,,c'.split(',') }}][{{ ' a  b '.split() }}][{{ 'a b c'.split(' ', 1) }}][{{ s.upper() }}][{{ 'Hi There'.lower() }}][{{ 'ab'.startswith('a') }}{{ 'ab'.endswith(('x', 'b')) }}][{{ 'hello world'.title() }}][{{ 'hELLO'.capitalize() }}][{{ 'aXbX'.replace('X', '-') }}][{{ 'abcb'.find('b') }}{{ 'abcb'.rfind('b') }}{{ 'abcb'.count('b') }}][{{ '-'.join(['a','b']) }}]", {"s": "  xhi there\t\n "}),
    ("unicode_strip", "[{{ s | trim }}][{{ s.strip() }}][{{ s | length }}][{{ s.split() }}]", {"s": "\u3000\u00a0 grüße 世界\u2003\n"}),
    ("filters_basic", "{{ ' x ' | trim }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello' | capitalize }}|{{ [1,2,3] | length }}|{{ 'héllo' | length }}|{{ d | length }}|{{ [3,1,2] | first }}{{ [3,1,2] | last }}|{{ [1,2] | join(', ') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 3 | string }}{{ '42' | int + 1 }}{{ 'x' | int }}{{ 2.7 | int }}|{{ [1,2,2,3,1] | unique | list }}|{{ [3,1,2] | sort }}|{{ [1,2] | reverse | list }}|{{ 'abc' | reverse }}|{{ -3 | abs }}|{{ [1,2,3] | sum }}|{{ [4,2,8] | min }}{{ [4,2,8] | max }}", {"d": {"a": 1, "b": 2}}),
    ("filter_default", "{{ x | default('dflt') }}|{{ y | default('dflt') }}|{{ '' | default('e', true) }}|{{ none | default('n') }}|{{ x | d('z') }}", {"y": "set"}),
    ("filters_select", "{{ l | select('odd') | list }}{{ l | reject('odd') | list }}{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ ms | rejectattr('role', 'eq', 'user') | list | length }}|{{ l | map('string') | join('') }}|{{ ms | selectattr('tool') | list | length }}|{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', ') }}", {"l": [1, 2, 3, 4], "ms": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1", "tool": True}, {"role": "user", "content": "u2"}]}),
    ("tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\\n\u0001' | tojson }}|{{ [1, 2.5, none, true] | tojson }}|{{ {} | tojson }}{{ [] | tojson(indent=4) }}|{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(indent=1, separators=(';', '=')) }}", {"d": {"z": [1, {"a": "b"}], "a": None, "f": 1.0}}),
    ("whitespace_control", "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif -%}  \n e {# comment #} f {#- c2 -#} g", {}),
    ("trim_lstrip_blocks", "<ul>\n  {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n  {# note #}\nend", {}),
    ("plus_modifiers", "a\n  {%+ if true %}\nb\n  {% endif +%}\nc", {}),
    ("lstrip_after_trim", "{% if true %}\n    {% set x = 1 %}\n    text{{ x }}\n{% endif %}\n", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("type_error_str_plus_int", "{{ 'a' ~ 1 + 2 }}", {}),
    ("undefined_attribute_of_undefined", "{{ nothing.attr }}", {}),
    ("generation_block", "{% for m in ms %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}", {"ms": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}),
    ("raise", "{% if x > 1 %}{{ raise_exception('x is too big: ' ~ x) }}{% endif %}ok", {"x": 2}),
    ("string_in_expression_with_braces", "{{- '{{\"name\": x}}' }}{{ \"%}\" }}{{ '#}' }}", {}),
    ("dict_literal_and_attr_chain", "{% set cfg = {'a': {'b': [10, 20]}} %}{{ cfg.a.b[1] }}{{ cfg['a']['b'][0] }}{{ cfg.a.b.0 }}", {}),
    ("math_precedence", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ 10 - 3 - 2 }}|{{ 7 // 2 * 2 }}|{{ 'a' ~ (1 + 2) }}|{{ 1.5 + 1 }}|{{ 0.1 + 0.2 }}|{{ 1 / 3 }}|{{ 1e20 * 10 }}|{{ 3 * 1.0 }}", {}),
    ("filter_precedence", "{{ '  a  ' | trim + 'b' }}|{{ 'x' + '  y ' | trim }}|{{ -3 | abs }}|{{ not 'a' | length }}|{{ l | length > 1 }}", {"l": [1, 2]}),
]


def make_jinja_renderer():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        """transformers' {% generation %}...{% endgeneration %} (its AssistantTracker marks assistant tokens;
        when no mask is requested it renders the body unchanged, which is all this does)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, messages, add_generation_prompt, kwargs):
        t = env.from_string(template)
        return t.render(messages=messages, tools=None, documents=None,
                        add_generation_prompt=add_generation_prompt, **kwargs)

    def render_raw(template, variables):
        return env.from_string(template).render(**variables)

    render.raw = render_raw
    return render, (jinja2.exceptions.TemplateError,), f"jinja2 {jinja2.__version__}"


def make_transformers_renderer():
    import jinja2
    import transformers
    from transformers.utils import chat_template_utils as ctu

    if hasattr(ctu, "render_jinja_template"):
        def render(template, messages, add_generation_prompt, kwargs):
            out, _ = ctu.render_jinja_template(conversations=[messages], tools=None, documents=None,
                                               chat_template=template, add_generation_prompt=add_generation_prompt,
                                               **kwargs)
            return out[0]
    else:
        def render(template, messages, add_generation_prompt, kwargs):
            t = ctu._compile_jinja_template(template)
            return t.render(messages=messages, tools=None, documents=None,
                            add_generation_prompt=add_generation_prompt, **kwargs)

    def render_raw(template, variables):
        return ctu._compile_jinja_template(template).render(**variables)

    render.raw = render_raw
    return render, (jinja2.exceptions.TemplateError,), f"transformers {transformers.__version__}"


def build(render, errors):
    cases = []
    for path in sorted(DATA.glob("*.jinja")):
        name = path.name
        template = path.read_text(encoding="utf-8")
        bos, eos = TOKENS[name]
        convs = dict(CONVERSATIONS)
        convs.update(EXTRA.get(name, {}))
        for kwargs in KWARGS.get(name, [{}]):
            for conv_name, messages in convs.items():
                for agp in (True, False):
                    case = {
                        "template": name,
                        "conversation": conv_name,
                        "messages": messages,
                        "add_generation_prompt": agp,
                        "bos_token": bos,
                        "eos_token": eos,
                        "extra": kwargs,
                    }
                    full = dict(kwargs, bos_token=bos, eos_token=eos)
                    try:
                        case["output"] = render(template, messages, agp, full)
                        if (name, conv_name) in EXPECT_ERROR:
                            sys.exit(f"{name}/{conv_name}: expected an error, got a rendering")
                    except errors as e:
                        if (name, conv_name) not in EXPECT_ERROR:
                            raise
                        case["error"] = str(e.message if hasattr(e, "message") and e.message else e)
                    cases.append(case)
    return cases


# Corpus: ~100 real templates of many model families (corpus_templates.json), each rendered for two
# conversations; the C++ side must give the same bytes (or raise where jinja2 raises).
CORPUS_CONVERSATIONS = [("system_multi_turn", True), ("whitespace_unicode", False)]
CORPUS_KWARGS = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"}


def build_corpus(render):
    path = DATA / "corpus_templates.json"
    if not path.exists():
        return []
    out = []
    for index, entry in enumerate(json.loads(path.read_text(encoding="utf-8"))["templates"]):
        for conv_name, agp in CORPUS_CONVERSATIONS:
            case = {"index": index, "model": entry["model"], "conversation": conv_name, "add_generation_prompt": agp}
            try:
                case["output"] = render(entry["template"], CONVERSATIONS[conv_name], agp, dict(CORPUS_KWARGS))
            except Exception as e:
                case["error"] = f"{type(e).__name__}: {e}"
            out.append(case)
    return out


def build_features(render, errors):
    out = []
    for name, template, variables in FEATURES:
        case = {"name": name, "template": template, "variables": variables}
        try:
            case["output"] = render.raw(template, variables)
        except Exception as e:  # template errors and Python type errors alike: the C++ side must throw too
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--use-transformers", action="store_true",
                    help="render through transformers' chat-template code (needs transformers importable)")
    ap.add_argument("--check", action="store_true", help="compare with expected.json instead of writing it")
    ap.add_argument("--out", type=Path, default=DATA / "expected.json")
    args = ap.parse_args()

    render, errors, engine = make_transformers_renderer() if args.use_transformers else make_jinja_renderer()
    cases = build(render, errors)
    features = build_features(render, errors)
    corpus = build_corpus(render)
    doc = {
        "generator": "tools/chat/render_expected.py",
        "note": "transformers-equivalent chat-template renderings; regenerate with the script, do not edit",
        "cases": cases,
        "features": features,
        "corpus_conversations": {name: CONVERSATIONS[name] for name, _ in CORPUS_CONVERSATIONS},
        "corpus_kwargs": CORPUS_KWARGS,
        "corpus": corpus,
    }
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    if args.check:
        old = json.loads(args.out.read_text(encoding="utf-8"))
        if old.get("features") != features:
            bad = [a["name"] for a, b in zip(old.get("features", []), features) if a != b]
            sys.exit(f"{engine}: feature case(s) differ from {args.out}: {bad[:10] or 'count'}")
        if old.get("corpus") != corpus:
            bad = [f"{a['model']}/{a['conversation']}" for a, b in zip(old.get("corpus", []), corpus) if a != b]
            sys.exit(f"{engine}: corpus case(s) differ from {args.out}: {bad[:10] or 'count'}")
        if old["cases"] != cases:
            bad = [f"{a['template']}/{a['conversation']}/agp={a['add_generation_prompt']}/{a['extra']}"
                   for a, b in zip(old["cases"], cases) if a != b]
            sys.exit(f"{engine}: {len(bad) or 'count'} case(s) differ from {args.out}: {bad[:10]}")
        print(f"{engine}: all {len(cases)} cases, {len(features)} feature cases and {len(corpus)} corpus cases "
              f"match {args.out}")
        return
    args.out.write_text(text, encoding="utf-8")
    print(f"{engine}: wrote {len(cases)} cases ({sum('error' in c for c in cases)} raising) and "
          f"{len(features)} feature cases ({sum('error' in c for c in features)} raising) and "
          f"{len(corpus)} corpus cases ({sum('error' in c for c in corpus)} raising) to {args.out}")


if __name__ == "__main__":
    main()
