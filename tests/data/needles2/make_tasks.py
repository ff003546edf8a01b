"""Build tasks.json of the second needle set (README.md beside this file).

The questions, answers, needles and labels are written here by hand; this script finds
each needle's full line in its recorded result, draws the other steps of each trajectory
with a fixed seed, and pins every source by sha256 (outputs.json.gz, written by
record.py). Rerun:

    python tests/data/needles2/make_tasks.py [OUT]   # OUT defaults to tasks.json here
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
OUT = HERE / "tasks.json"
OUTPUTS = "tests/data/needles2/outputs.json.gz"
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benches"))

import rampart  # noqa: E402
from needle_bench import materialise  # noqa: E402

MIN_BYTES, MAX_BYTES = 1500, 18_000
# a trajectory's results in o200k_base tokens: 16k and 8k windows must clear most of them
MIN_TOKENS, MAX_TOKENS = 36_000, 84_000

SYSTEM = (
    "You are a research agent. You can fetch web pages, read the FastAPI repository's "
    "history with the git tools, and query the music store's SQL database. Answer the "
    "user's questions from what the tools returned, and say so when what you read does "
    "not settle a question."
)
TOOLS = {
    "mcp-server-fetch": ["fetch"],
    "mcp-server-git": ["git_status", "git_log", "git_show", "git_diff"],
    "mcp-alchemy": ["all_table_names", "filter_table_names", "schema_definitions", "execute_query"],
}

# ---- the needles: id -> (source id, fragments; each fragment picks the one line holding it) ----

NEEDLES: dict[str, tuple[str, list[str]]] = {
    # ---- tune documents
    "zh_mem": (
        "fetch:fastapi/zh/deployment/concepts",
        ["机器学习模型,则当你使用 API 运行一个进程时"],
    ),
    "zh_500": ("fetch:fastapi/zh/deployment/concepts", ["对于该请求,客户端将收到 500"]),
    "zh_compose": (
        "fetch:fastapi/zh/deployment/docker",
        ["在使用 docker compose 时这一点尤为明显"],
    ),
    "zh_mw_order": ("fetch:fastapi/zh/tutorial/middleware", ["* 请求:MiddlewareB"]),
    "zh_argon": ("fetch:fastapi/zh/tutorial/security/oauth2-jwt", ["推荐的算法是"]),
    "ja_daphne": ("fetch:fastapi/ja/deployment/manually", ["* Daphne:"]),
    "ja_reload": ("fetch:fastapi/ja/deployment/manually", ["しかし --reload は多くのリソース"]),
    "ja_entry": (
        "fetch:fastapi/ja/tutorial/first-steps",
        ["pyproject.tomlでアプリの場所を", 'entrypoint = "main:app"'],
    ),
    "ja_two_docs": (
        "fetch:fastapi/ja/tutorial/first-steps",
        ["2つのインタラクティブなドキュメント"],
    ),
    "es_pin": ("fetch:fastapi/es/deployment/versions", ["pero menores que 0.113.0"]),
    "es_blueprints": ("fetch:fastapi/es/tutorial/bigger-applications", ["los Blueprints de Flask"]),
    "de_subdocs": (
        "fetch:fastapi/de/advanced/sub-applications",
        ["unter http://127.0.0.1:8000/subapi/docs"],
    ),
    "de_swallow": (
        "fetch:fastapi/de/tutorial/dependencies/dependencies-with-yield",
        ["der Server hat keine Logs"],
    ),
    "ru_sanic": ("fetch:fastapi/ru/benchmarks", ["сравнивайте его с Sanic"]),
    "ru_tax": ("fetch:fastapi/ru/tutorial/body-updates", ['"tax": 10.5.']),
    "ru_unset": ("fetch:fastapi/ru/tutorial/body-updates", ["Например, item.model"]),
    "hx_idle": ("fetch:httpx/advanced/timeouts", ["after 5 seconds of network inactivity"]),
    "hx_latin1": ("fetch:httpx/compatibility", ["Requests which uses latin1"]),
    "hx_badssl": (
        "fetch:httpx/advanced/ssl",
        ['httpx.get("https://expired.badssl.com/") httpx.ConnectError'],
    ),
    "hx_tls_proxy": ("fetch:httpx/troubleshooting", ["does not properly support HTTPS proxies"]),
    "hx_logdate": ("fetch:httpx/logging", ["DEBUG [2024-09-28 17:27:40]"]),
    "fa_cors_methods": ("fetch:fastapi/en/tutorial/cors", ["Defaults to ['GET']"]),
    "fa_items50": ("fetch:fastapi/en/advanced/settings", ["keep its default value of 50"]),
    "fa_left_chat": (
        "fetch:fastapi/en/advanced/websockets",
        ["Client #1596980209979 left the chat"],
    ),
    "fa_pid": ("fetch:fastapi/en/deployment/server-workers", ["27365 for the parent process"]),
    "g_conf": ("git_show:ad24bc87", ["is happening on **October 28, 2026**"]),
    "g_fe_warn": ("git_show:5429fed8", ["only shows a warning if the frontend build output"]),
    "sq_gm": ("sql:employees", ["Title: General Manager", "HireDate: 2002-08-14"]),
    "sq_scifi": ("sql:genres", ["Genre: Sci Fi & Fantasy", "AvgMinutes: 48.53"]),
    "sq_grapevine": (
        "sql:chronicle_vol1",
        ["Name: I Heard It Through The Grapevine", "Composer: Whitfield-Strong"],
    ),
    # ---- holdout documents
    "zh_307": ("fetch:fastapi/zh/advanced/custom-response", ["默认情况下使用 307 状态码"]),
    "zh_0951": ("fetch:fastapi/zh/tutorial/path-params-numeric-validations", ["升级到至少 0.95.1"]),
    "zh_def": ("fetch:fastapi/zh/async", ["如果你不清楚,使用 def 就好"]),
    "zh_await": ("fetch:fastapi/zh/async", ["你只能在被 async def 创建的函数内使用 await"]),
    "zh_template": ("fetch:fastapi/zh/tutorial/sql-databases", ["full-stack-fastapi-template"]),
    "zh_index": ("fetch:fastapi/zh/tutorial/sql-databases", ["SQL 索引"]),
    "ja_304": ("fetch:fastapi/ja/tutorial/response-status-code", ["304(Not Modified)"]),
    "ja_tmpl_ver": ("fetch:fastapi/ja/advanced/templates", ["FastAPI 0.108.0、Starlette 0.29.0"]),
    "ja_css": ("fetch:fastapi/ja/advanced/templates", ["URL /static/styles.css"]),
    "es_method": (
        "fetch:fastapi/es/advanced/generate-clients",
        ["los nombres de los métodos generados como createItemItemsPost"],
    ),
    "es_cookie_docs": ("fetch:fastapi/es/tutorial/cookie-params", ["las cookies no se enviarán"]),
    "de_openapi_env": (
        "fetch:fastapi/de/how-to/conditional-openapi",
        ["auf einen leeren String setzen"],
    ),
    "de_404": ("fetch:fastapi/de/how-to/conditional-openapi", ["404 Not Found-Fehler"]),
    "de_colon": ("fetch:fastapi/de/python-types", ["Wir verwenden Doppelpunkte"]),
    "ru_a2wsgi": ("fetch:fastapi/ru/advanced/wsgi", ["требуется добавить a2wsgi"]),
    "ru_v1": ("fetch:fastapi/ru/advanced/wsgi", ["по пути /v1/"]),
    "ru_80": ("fetch:fastapi/ru/history-design-future", ["охватывает около 80%"]),
    "hx_socks": ("fetch:httpx/advanced/proxies", ["httpx.Client(proxy='socks5://"]),
    "hx_uds": ("fetch:httpx/advanced/transports", ['uds="/var/run/docker.sock"']),
    "hx_h2_off": ("fetch:httpx/http2", ["HTTP/2 support is not enabled by default"]),
    "fa_418": ("fetch:fastapi/en/tutorial/handling-errors", ["HTTP status code of 418"]),
    "fa_summary": ("fetch:fastapi/en/tutorial/metadata", ["| summary | str |"]),
    "fa_lifespan": ("fetch:fastapi/en/advanced/events", ["not for Sub Applications - Mounts"]),
    "fa_le": ("fetch:fastapi/en/deployment/https", ["It is a project from the Linux Foundation"]),
    "g_ko_redoc": ("git_show:051d1156", ["+* [**ReDoc**](https://github.com/Redocly/redoc)"]),
    "g_regr": ("git_show:7d123d95", ["timeout-minutes: 10"]),
    "sq_maiden": ("sql:artists_25_tracks", ["Artist: Iron Maiden", "Albums: 21"]),
    "sq_long": ("sql:longest_tracks", ["Track: Occupation / Precipice", "Milliseconds: 5286953"]),
    "sq_usa": ("sql:revenue_by_country", ["BillingCountry: USA", "Revenue: 523.06"]),
    "sq_embraer": ("sql:customers_4_countries", ["Company: Embraer"]),
}

# Strings that must occur in no other result of the trajectory (the answer, or what would
# give it away); the needle lines themselves always are.
UNIQUE: dict[str, list[str]] = {
    "zh_mem": ["4 GB RAM"],
    "zh_500": ["500 内部服务器错误"],
    "zh_compose": ["10 秒"],
    "zh_mw_order": ["MiddlewareB → MiddlewareA"],
    "zh_argon": ["Argon2"],
    "ja_daphne": ["Daphne"],
    "ja_reload": ["多くのリソースを消費"],
    "ja_entry": ['entrypoint = "main:app"'],
    "ja_two_docs": ["2つのインタラクティブ"],
    "es_pin": ["menores que 0.113.0"],
    "es_blueprints": ["Blueprints"],
    "de_subdocs": ["/subapi/docs"],
    "de_swallow": ["keine Logs"],
    "ru_sanic": ["Sanic"],
    "ru_tax": ['"tax": 10.5'],
    "ru_unset": ["exclude\\_unset=True"],
    "hx_idle": ["5 seconds of network inactivity"],
    "hx_latin1": ["latin1"],
    "hx_badssl": ["expired.badssl.com"],
    "hx_tls_proxy": ["encode/httpx#1434"],
    "hx_logdate": ["2024-09-28"],
    "fa_cors_methods": ["Defaults to ['GET']"],
    "fa_items50": ["default value of 50"],
    "fa_left_chat": ["left the chat"],
    "fa_pid": ["27365"],
    "g_conf": ["October 28, 2026"],
    "g_fe_warn": ["only shows a warning"],
    "sq_gm": ["2002-08-14"],
    "sq_scifi": ["48.53"],
    "sq_grapevine": ["Whitfield-Strong"],
    "zh_307": ["307 状态码"],
    "zh_0951": ["0.95.1"],
    "zh_def": ["使用 def 就好"],
    "zh_await": ["只能在被 async def 创建的函数内使用 await"],
    "zh_template": ["full-stack-fastapi-template"],
    "zh_index": ["Field(index=True)"],
    "ja_304": ["304"],
    "ja_tmpl_ver": ["0.108.0"],
    "ja_css": ["/static/styles.css"],
    "es_method": ["createItemItemsPost"],
    "es_cookie_docs": ["las cookies no se enviarán"],
    "de_openapi_env": ["OPENAPI_URL="],
    "de_404": ["404 Not Found-Fehler"],
    "de_colon": ["Doppelpunkte (:)"],
    "ru_a2wsgi": ["a2wsgi"],
    "ru_v1": ["по пути /v1/"],
    "ru_80": ["80%"],
    "hx_socks": ["socks5://"],
    "hx_uds": ["/var/run/docker.sock"],
    "hx_h2_off": ["battle-hardened"],
    "fa_418": ["418"],
    "fa_summary": ["FastAPI 0.99.0"],
    "fa_lifespan": ["not for Sub Applications"],
    "fa_le": ["about 3 months"],
    "g_ko_redoc": ["Redocly/redoc"],
    "g_regr": ["timeout-minutes: 10"],
    "sq_maiden": ["Albums: 21"],
    "sq_long": ["Occupation / Precipice"],
    "sq_usa": ["523.06"],
    "sq_embraer": ["Embraer"],
}

TASKS_TEXT = [
    "We're deciding whether to build our next service on FastAPI. Read through its docs "
    "(the English ones and the translations our team members will use), the HTTPX client "
    "docs, the latest commits in its repository, and poke at the sample music-store "
    "database we'll demo with; I'll ask you things afterwards.",
    "I'm onboarding to a team that ships a FastAPI backend with an HTTPX-based client and a "
    "SQL reporting database. Fetch the relevant documentation pages, skim recent commits, "
    "and run a few queries so you know your way around.",
    "Collect background for an internal write-up: the FastAPI documentation in several "
    "languages, the HTTPX guides, what changed recently in the FastAPI repository, and "
    "some numbers from the Chinook sales database.",
    "Please do a broad read-through for me: web docs of the framework and the HTTP client, "
    "the repository's recent history, and the store database's tables and a few reports. "
    "Then wait for my follow-up questions.",
    "Our support engineers work in Chinese, Japanese, Spanish, German and Russian as well "
    "as English. Go over the framework's docs in those languages, the HTTP client guides, "
    "recent commits and the sales database, and be ready for questions.",
]

# (id, kind, label, needles, question, answer, question language, cross-language)
T = tuple[str, str, str, list[str], str, str, str, bool]
TASKS: list[T] = [
    # ---- tune: old
    (
        "tune-old-01",
        "old",
        "paraphrase",
        ["zh_mem"],
        "部署文档里讲服务器内存的那个例子：模型有多大、开几个工作进程、最后一共要占多少内存？",
        "1 GB 的模型，4 个工作进程，总共 4 GB 内存",
        "zh",
        False,
    ),
    (
        "tune-old-02",
        "old",
        "lexical",
        ["ja_daphne"],
        "Django 向けに作られた ASGI サーバーとして挙げられていたのはどれでしたか？",
        "Daphne(Django Channels のため)",
        "ja",
        False,
    ),
    (
        "tune-old-03",
        "old",
        "paraphrase",
        ["es_pin"],
        "Si estoy en la versión que ponen de ejemplo y solo quiero aceptar parches, nunca la "
        "siguiente versión menor, ¿qué versiones quedan permitidas?",
        "0.112.0 o superiores pero menores que 0.113.0 (p. ej. 0.112.2): >=0.112.0,<0.113.0",
        "es",
        False,
    ),
    (
        "tune-old-04",
        "old",
        "paraphrase",
        ["de_swallow"],
        "Was bekommt der Aufrufer zu sehen, wenn eine Abhängigkeit mit Aufräumcode einen Fehler "
        "abfängt und einfach verschluckt – und was erfährt man davon auf dem Server?",
        "einen HTTP 500 Internal Server Error; auf dem Server keine Logs, kein Hinweis",
        "de",
        False,
    ),
    (
        "tune-old-05",
        "old",
        "paraphrase",
        ["ru_tax"],
        "Если обновить товар методом PUT и не передать поле налога, какое значение налога в "
        "итоге сохранится вместо прежнего?",
        "значение по умолчанию 10.5 (вместо сохранённого 20.2)",
        "ru",
        False,
    ),
    (
        "tune-old-06",
        "old",
        "paraphrase",
        ["hx_idle"],
        "By default, how long will the HTTP client library sit on a silent connection before "
        "it gives up?",
        "5 seconds of network inactivity, then a TimeoutException",
        "en",
        False,
    ),
    (
        "tune-old-07",
        "old",
        "paraphrase",
        ["fa_cors_methods"],
        "If I leave that setting alone, which request verbs will the cross-site access "
        "middleware let browsers use?",
        "only GET (allow_methods defaults to ['GET'])",
        "en",
        False,
    ),
    (
        "tune-old-08",
        "old",
        "lexical",
        ["g_conf"],
        "When and where was FastAPI Conf '26 happening, according to the banner that was taken "
        "off the docs home page?",
        "October 28, 2026, in Amsterdam",
        "en",
        False,
    ),
    (
        "tune-old-09",
        "old",
        "paraphrase",
        ["sq_gm"],
        "In the music store's staff records, when did the person at the very top of the company "
        "start working there?",
        "2002-08-14 (Andrew Adams, General Manager)",
        "en",
        False,
    ),
    (
        "tune-old-10",
        "old",
        "lexical",
        ["zh_compose"],
        "With Compose, how long does a service take to stop or be recreated when the "
        "container's start command is written the wrong way?",
        "10 seconds (use the exec form of CMD)",
        "en",
        True,
    ),
    (
        "tune-old-11",
        "old",
        "paraphrase",
        ["hx_latin1"],
        "When you send a plain string as the body, which character set did the older, hugely "
        "popular synchronous library encode it with, unlike this client?",
        "latin1 (HTTPX uses utf-8)",
        "en",
        False,
    ),
    # ---- tune: recent
    (
        "tune-recent-01",
        "recent",
        "paraphrase",
        ["zh_mw_order"],
        "如果我先注册了中间件 A、再注册 B，请求进来的时候它们按什么顺序执行？",
        "先 B 后 A，再到路由(最后添加的在最外层)",
        "zh",
        False,
    ),
    (
        "tune-recent-02",
        "recent",
        "paraphrase",
        ["ja_entry"],
        "プロジェクト設定ファイルでアプリの場所を指定するには、どのセクションにどんなキーを書けばいいですか？",
        '[tool.fastapi] の entrypoint = "main:app"',
        "ja",
        False,
    ),
    (
        "tune-recent-03",
        "recent",
        "lexical",
        ["es_blueprints"],
        "What does the guide on splitting an app over several files say its router is "
        "equivalent to, if you come from Flask?",
        "Flask's Blueprints",
        "en",
        True,
    ),
    (
        "tune-recent-04",
        "recent",
        "lexical",
        ["sq_scifi"],
        "On average, how many minutes does a track in the sci-fi and fantasy category run?",
        "48.53 minutes",
        "en",
        False,
    ),
    (
        "tune-recent-05",
        "recent",
        "paraphrase",
        ["g_fe_warn"],
        "If the compiled browser assets aren't there yet while I'm developing locally, does "
        "the app now refuse to start?",
        "no: with FASTAPI_ENV=development it only warns (check_dir='auto'); elsewhere it errors",
        "en",
        False,
    ),
    (
        "tune-recent-06",
        "recent",
        "paraphrase",
        ["de_subdocs"],
        "Unter welcher Adresse finde ich die automatisch erzeugte Doku der eingehängten Teil-App?",
        "http://127.0.0.1:8000/subapi/docs",
        "de",
        False,
    ),
    (
        "tune-recent-07",
        "recent",
        "paraphrase",
        ["hx_logdate"],
        "On what day was the sample trace in the client's docs on log output captured?",
        "2024-09-28",
        "en",
        False,
    ),
    # ---- tune: two needles
    (
        "tune-two-01",
        "two",
        "paraphrase",
        ["zh_argon", "zh_500"],
        "两个问题：保存用户口令时文档推荐哪种散列算法？另外，如果代码里的 bug 只影响某一个请求，"
        "客户端会拿到什么状态码？",
        "Argon2；500 内部服务器错误(应用继续处理下一个请求)",
        "zh",
        False,
    ),
    (
        "tune-two-02",
        "two",
        "paraphrase",
        ["ru_sanic", "ru_unset"],
        "Два вопроса: с чем корректно сравнивать по скорости микрофреймворк, на котором построен "
        "FastAPI, и какой "
        "аргумент выгрузки модели в словарь оставляет только реально присланные поля?",
        "с веб-фреймворками вроде Sanic, Flask, Django; exclude_unset=True",
        "ru",
        False,
    ),
    (
        "tune-two-03",
        "two",
        "lexical",
        ["hx_badssl", "hx_tls_proxy"],
        "Which test site with a lapsed certificate does the TLS guide use to show verification "
        "failing, and can the client go through a proxy that itself speaks TLS?",
        "expired.badssl.com; not properly supported (encode/httpx#1434)",
        "en",
        False,
    ),
    (
        "tune-two-04",
        "two",
        "paraphrase",
        ["sq_grapevine", "fa_left_chat"],
        "Two things: on the Creedence compilation, who wrote the one long song that isn't a "
        "Fogerty original, and what does the group-messaging demo broadcast when someone closes "
        "their tab?",
        "Whitfield-Strong (I Heard It Through The Grapevine); 'Client #<id> left the chat'",
        "en",
        False,
    ),
    (
        "tune-two-05",
        "two",
        "paraphrase",
        ["ja_reload", "ja_two_docs"],
        "二つ教えてください：コードを変えると自動で再起動するオプションを本番で使うべきでない理由は？"
        "それと、標準で付いてくる対話的なドキュメントはいくつありますか？",
        "リソースを多く消費し不安定になりうるから；2つ",
        "ja",
        False,
    ),
    (
        "tune-two-06",
        "two",
        "lexical",
        ["fa_items50", "fa_pid"],
        "In the configuration tutorial, what's the default items_per_user, and what PID did the "
        "parent process have in the four-worker example?",
        "50; 27365",
        "en",
        False,
    ),
    # ---- holdout: old
    (
        "holdout-old-01",
        "old",
        "paraphrase",
        ["zh_307"],
        "返回跳转的时候，默认用的是哪个状态码？",
        "307(临时重定向)",
        "zh",
        False,
    ),
    (
        "holdout-old-02",
        "old",
        "paraphrase",
        ["zh_0951"],
        "想用那种把校验信息写进类型注解里的参数写法，框架至少要升级到哪个版本？",
        "0.95.1",
        "zh",
        False,
    ),
    (
        "holdout-old-03",
        "old",
        "paraphrase",
        ["ja_304"],
        "3xx の転送系ステータスのうち、本文を持たないとされている例外はどれですか？",
        "304(Not Modified)",
        "ja",
        False,
    ),
    (
        "holdout-old-04",
        "old",
        "paraphrase",
        ["es_cookie_docs"],
        "¿Por qué, si pruebo el endpoint desde la página interactiva de la documentación, la "
        "galleta del navegador no llega y me sale un error?",
        "porque esa interfaz funciona con JavaScript y el navegador no envía las cookies",
        "es",
        False,
    ),
    (
        "holdout-old-05",
        "old",
        "lexical",
        ["de_openapi_env"],
        "Wie schalte ich die generierte Schnittstellenbeschreibung samt Doku-Seiten in der "
        "Produktion über eine Umgebungsvariable komplett ab?",
        "OPENAPI_URL auf einen leeren String setzen",
        "de",
        False,
    ),
    (
        "holdout-old-06",
        "old",
        "paraphrase",
        ["ru_a2wsgi"],
        "Какой пакет теперь нужно установить, чтобы встроить приложение на Flask внутрь FastAPI?",
        "a2wsgi (WSGIMiddleware из него)",
        "ru",
        False,
    ),
    (
        "holdout-old-07",
        "old",
        "lexical",
        ["hx_socks"],
        "Which URL scheme do I give the client to send its traffic through a SOCKS proxy?",
        "socks5:// (e.g. socks5://user:pass@host:port)",
        "en",
        False,
    ),
    (
        "holdout-old-08",
        "old",
        "paraphrase",
        ["fa_418"],
        "In the example with a home-made exception and its handler, which unusual status code "
        "does the client end up with?",
        "418",
        "en",
        False,
    ),
    (
        "holdout-old-09",
        "old",
        "paraphrase",
        ["g_ko_redoc"],
        "In the Korean feature page update, where does the link for the alternative API "
        "reference renderer point now?",
        "https://github.com/Redocly/redoc",
        "en",
        True,
    ),
    (
        "holdout-old-10",
        "old",
        "paraphrase",
        ["sq_maiden"],
        "How many albums by the band behind 'The Number of the Beast' does the store carry?",
        "21 (213 tracks)",
        "en",
        False,
    ),
    (
        "holdout-old-11",
        "old",
        "lexical",
        ["zh_template"],
        "What's the address of the official project generator that pairs the framework with "
        "Postgres and a frontend?",
        "https://github.com/fastapi/full-stack-fastapi-template",
        "en",
        True,
    ),
    # ---- holdout: recent
    (
        "holdout-recent-01",
        "recent",
        "paraphrase",
        ["zh_def"],
        "如果拿不准路径操作函数该不该写成异步的，文档建议怎么做？",
        "用普通的 def",
        "zh",
        False,
    ),
    (
        "holdout-recent-02",
        "recent",
        "paraphrase",
        ["ja_tmpl_ver"],
        "テンプレートを返すとき、テンプレート名が最初の引数だったのはどのバージョンまででしたか？",
        "FastAPI 0.108.0 / Starlette 0.29.0 以前",
        "ja",
        False,
    ),
    (
        "holdout-recent-03",
        "recent",
        "paraphrase",
        ["ru_80"],
        "Какой процент программистов пользуется редакторами, на которых проверяли идеи фреймворка?",
        "около 80%",
        "ru",
        False,
    ),
    (
        "holdout-recent-04",
        "recent",
        "lexical",
        ["fa_summary"],
        "Since which release of the framework can I give the API a one-line summary in its "
        "descriptive fields?",
        "FastAPI 0.99.0 (OpenAPI 3.1.0)",
        "en",
        False,
    ),
    (
        "holdout-recent-05",
        "recent",
        "paraphrase",
        ["sq_long"],
        "What's the single longest item in the whole catalogue, and how long does it run?",
        "Occupation / Precipice (Battlestar Galactica), 5 286 953 ms (about 88 minutes)",
        "en",
        False,
    ),
    (
        "holdout-recent-06",
        "recent",
        "paraphrase",
        ["g_regr"],
        "How long may the new CI job that re-runs changed tests against the base code run "
        "before it is cut off?",
        "10 minutes",
        "en",
        False,
    ),
    (
        "holdout-recent-07",
        "recent",
        "paraphrase",
        ["es_method"],
        "Antes de personalizar los identificadores de operación, ¿qué nombre tan feo le ponía el "
        "cliente generado al método de crear un item?",
        "createItemItemsPost (ItemsService.createItemItemsPost)",
        "es",
        False,
    ),
    # ---- holdout: two needles
    (
        "holdout-two-01",
        "two",
        "lexical",
        ["zh_await", "zh_index"],
        "两个问题：在普通的 def 函数里能不能用 await？还有，模型字段怎么声明才会给这一列建索引？",
        "不能，只能在 async def 里用；Field(index=True)",
        "zh",
        False,
    ),
    (
        "holdout-two-02",
        "two",
        "paraphrase",
        ["de_colon", "de_404"],
        "Zwei Fragen: Welches Satzzeichen trennt bei Typhinweisen den Parameternamen vom Typ, und "
        "was bekommt man, wenn die Schnittstellenbeschreibung abgeschaltet ist und man die "
        "Doku-Seiten aufruft?",
        "einen Doppelpunkt; einen 404 Not Found-Fehler",
        "de",
        False,
    ),
    (
        "holdout-two-03",
        "two",
        "lexical",
        ["hx_uds", "hx_h2_off"],
        "How do I point the client at the container engine's local socket file, and why isn't "
        "the newer multiplexed protocol switched on by default?",
        'HTTPTransport(uds="/var/run/docker.sock"); HTTP/1.1 is mature and battle-hardened',
        "en",
        False,
    ),
    (
        "holdout-two-04",
        "two",
        "lexical",
        ["fa_lifespan", "fa_le"],
        "Do the lifespan startup and shutdown hooks also run for mounted sub-applications, and "
        "roughly how long do Let's Encrypt certificates stay valid?",
        "no, only for the main application; about 3 months",
        "en",
        False,
    ),
    (
        "holdout-two-05",
        "two",
        "lexical",
        ["ru_v1", "ja_css"],
        "Two things from the guides: under which path does the mounted Flask app answer in the "
        "WSGI example, and at which URL is the stylesheet served in the example that renders "
        "Jinja pages?",
        "/v1/; /static/styles.css",
        "en",
        True,
    ),
    (
        "holdout-two-06",
        "two",
        "paraphrase",
        ["sq_usa", "sq_embraer"],
        "From the sales queries: how much money came in from customers billed in the United "
        "States, and which aircraft manufacturer shows up among the Brazilian customers?",
        "523.06; Embraer - Empresa Brasileira de Aeronáutica S.A.",
        "en",
        False,
    ),
]


def load_outputs() -> dict[str, Any]:
    with gzip.open(ROOT / OUTPUTS, "rt", encoding="utf-8") as f:
        out: dict[str, Any] = json.load(f)
    return out


def lang_of(sid: str) -> str:
    if sid.startswith("fetch:fastapi/"):
        return sid.split("/")[1]
    if sid == "git_show:051d1156":
        return "ko"  # a Korean translation update: its diff is Korean text
    return "en"


def sources(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for o in rec["outputs"]:
        if not MIN_BYTES <= len(o["text"].encode()) <= MAX_BYTES:
            continue
        out[o["id"]] = {
            "kind": "mcp_output",
            "file": OUTPUTS,
            "server": o["server"],
            "tool": o["tool"],
            "arguments": o["arguments"],
            "sha256": o["sha256"],
            "lang": lang_of(o["id"]),
        }
    return out


def find_line(text: str, fragment: str, where: str) -> str:
    # one distinct line (a diff may repeat a line verbatim: the same text in two files)
    hits = sorted({line for line in text.split("\n") if fragment in line})
    if len(hits) != 1:
        raise SystemExit(f"{where}: {fragment!r} is on {len(hits)} distinct lines, not one")
    return hits[0]


def main(argv: list[str] | None = None) -> int:
    out_path = Path(argv[0]) if argv else OUT
    rec = load_outputs()
    srcs = sources(rec)
    texts = materialise({"sources": srcs})
    tokens = {sid: rampart.count_tokens(t, "o200k_base") for sid, t in texts.items()}
    needles: dict[str, dict[str, Any]] = {
        nid: {"source": sid, "lines": [find_line(texts[sid], f, nid) for f in frags]}
        for nid, (sid, frags) in NEEDLES.items()
    }
    assert set(UNIQUE) == set(NEEDLES), set(UNIQUE) ^ set(NEEDLES)
    split_of: dict[str, set[str]] = {"tune": set(), "holdout": set()}
    tasks: list[dict[str, Any]] = []
    for tid, kind, label, nids, question, answer, lang, cross in TASKS:
        split = tid.split("-")[0]
        rng = random.Random(f"rampart-needles2-{tid}")
        mine = [needles[x] for x in nids]
        must_be_alone = [line.strip() for x in nids for line in needles[x]["lines"]]
        must_be_alone += [u for x in nids for u in UNIQUE[x]]
        needle_sources = [m["source"] for m in mine]
        assert len(set(needle_sources)) == len(mine), tid
        split_of[split].update(needle_sources)
        for u in must_be_alone:
            assert u not in question, (tid, u)
        pool = sorted(
            sid
            for sid, t in texts.items()
            if sid not in needle_sources and not any(u in t for u in must_be_alone)
        )
        for _attempt in range(500):
            n = rng.randint(20, 40)
            fillers = rng.sample(pool, n - len(mine))
            total = sum(tokens[s] for s in fillers) + sum(tokens[s] for s in needle_sources)
            if MIN_TOKENS <= total <= MAX_TOKENS:
                break
        else:
            raise SystemExit(f"{tid}: no trajectory of {MIN_TOKENS}-{MAX_TOKENS} tokens")
        if kind == "recent":
            positions = [rng.randint(n - 3, n - 1)]
        else:
            positions = rng.sample(range(n // 2), len(mine))
        trajectory: list[str | None] = [None] * n
        for p, m in zip(positions, mine):
            trajectory[p] = m["source"]
        it = iter(fillers)
        traj = [s if s is not None else next(it) for s in trajectory]
        task_text = TASKS_TEXT[rng.randrange(len(TASKS_TEXT))]
        doc_langs = sorted({lang_of(s) for s in needle_sources})
        assert cross == (lang not in doc_langs), (tid, lang, doc_langs)
        tasks.append(
            {
                "id": tid,
                "kind": kind,
                "split": split,
                "label": label,
                "lang": lang,
                "doc_lang": doc_langs,
                "cross_language": cross,
                "task": task_text,
                "trajectory": traj,
                "needles": [
                    {
                        "id": x,
                        "step": p,
                        "source": needles[x]["source"],
                        "lines": needles[x]["lines"],
                    }
                    for x, p in zip(nids, positions)
                ],
                "unique": [u for x in nids for u in UNIQUE[x]],
                "question": question,
                "answer": answer,
                "result_tokens": total,
            }
        )
    both = split_of["tune"] & split_of["holdout"]
    assert not both, both
    used = sorted({s for t in tasks for s in t["trajectory"]})
    tool_defs = [
        t for server, names in TOOLS.items() for t in rec["tools"][server] if t["name"] in names
    ]
    out = {
        "about": (
            "Second needle-in-trajectory set: real results of mcp-server-fetch (FastAPI docs in "
            "six languages, HTTPX docs), mcp-server-git (FastAPI commits) and mcp-alchemy "
            "(Chinook in SQLite), recorded in outputs.json.gz by record.py; questions written "
            "by hand. See README.md; built by make_tasks.py."
        ),
        "servers": rec["servers"],
        "repositories": rec["repositories"],
        "system": SYSTEM,
        "tools": tool_defs,
        "sources": {s: srcs[s] for s in used},
        "tasks": tasks,
    }
    out_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(tasks)} tasks, {len(used)} sources -> {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
