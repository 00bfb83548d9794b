"""``--dataset hf:<name>[:<split>]``: Hub rows converted into the project schema, and the errors.

The Hub rows below are real rows of the public datasets, copied from their sources and laid out as
the Hub datasets' cards describe (GSM8K, NQ-open: verbatim lines of the files the Hub copies hold;
TriviaQA: a row printed from ``mandarjoshi/trivia_qa``, less its evidence documents, which the
converter does not read; HotpotQA, MMLU, MATH: the original release's row with its fields in the
Hub's layout). Where the shipped subset holds the same question, the converted row must equal the
shipped row. No test reaches the network: ``datasets`` is either absent (then the error is tested)
or replaced by a stand-in module whose ``load_dataset`` returns these rows.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from grade.tasks import hf_datasets as hf
from grade.common.errors import InputError
from grade.tasks.tasks import load_questions, read_jsonl, resolve_dataset

ROOT = Path(__file__).resolve().parents[1]

GSM8K_TRAIN_4530 = {  # grade_school_math/data/train.jsonl, line 4531
    "question": "The result from the 40-item Statistics exam Marion and Ella took already came out. Ella got 4 "
                "incorrect answers while Marion got 6 more than half the score of Ella. What is Marion's score?",
    "answer": "Ella's score is 40 items - 4 items = <<40-4=36>>36 items.\nHalf of Ella's score is 36 items / 2 = "
              "<<36/2=18>>18 items.\nSo, Marion's score is 18 items + 6 items = <<18+6=24>>24 items.\n#### 24",
}
GSM8K_TRAIN_5330 = {  # line 5331: a final answer with a thousands separator
    "question": "Steve makes 40000$ a year as a teacher.  He loses 20 percent to taxes, 10 percent to healthcare, "
                "and 800$ to local union dues.  How much money does Steve take home?",
    "answer": "Taxes:40000(.20)=8000$\nHealthcare:40000(.10)=4000$\nDues:<<800=800>>800$\n"
              "Total:40000-8000-4000-800=<<40000-8000-4000-800=27200>>27,200$\n#### 27,200",
}
NQ_OPEN_DEV_1006 = {"question": "when did the first marvel vs capcom come out", "answer": ["1998", "in 1996", "1996"]}
TRIVIAQA_RC_TRAIN_1 = {
    "question": "Where in England was Dame Judi Dench born?",
    "question_id": "tc_3",
    "question_source": "http://www.triviacountry.com/",
    "answer": {
        "aliases": ["Park Grove (1895)", "York UA", "Yorkish", "UN/LOCODE:GBYRK", "York, UK", "Eoforwic",
                    "Park Grove School", "York Ham", "The weather in York", "City of York", "York, England",
                    "York, Yorkshire", "York ham", "County Borough of York", "YORK", "Eoferwic",
                    "Park Grove Primary School", "York, North Yorkshire", "Yoisk", "York", "York (England)"],
        "matched_wiki_entity_name": "",
        "normalized_aliases": ["york yorkshire", "eoferwic", "park grove primary school", "park grove school",
                               "weather in york", "park grove 1895", "eoforwic", "county borough of york", "york uk",
                               "un locode gbyrk", "city of york", "york england", "york ua", "york ham", "york",
                               "yorkish", "yoisk", "york north yorkshire"],
        "normalized_matched_wiki_entity_name": "",
        "normalized_value": "york",
        "type": "WikipediaEntity",
        "value": "York",
    },
}
HOTPOTQA_DEV = {  # the first question of hotpot_dev_distractor_v1.json
    "id": "5a8b57f25542995d1e6f1371",
    "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
    "answer": "yes",
    "type": "comparison",
    "level": "hard",
    "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood"], "sent_id": [0, 0]},
    "context": {
        "title": ["Ed Wood (film)", "Scott Derrickson", "Woodson, Arkansas", "Tyler Bates", "Ed Wood",
                  "Deliver Us from Evil (2014 film)", "Adam Collis", "Sinister (film)", "Conrad Brooks",
                  "Doctor Strange (2016 film)"],
        "sentences": [
            ["Ed Wood is a 1994 American biographical period comedy-drama film directed and produced by Tim Burton, "
             "and starring Johnny Depp as cult filmmaker Ed Wood.",
             " The film concerns the period in Wood's life when he made his best-known films as well as his "
             "relationship with actor Bela Lugosi, played by Martin Landau.",
             " Sarah Jessica Parker, Patricia Arquette, Jeffrey Jones, Lisa Marie, and Bill Murray are among the "
             "supporting cast."],
            ["Scott Derrickson (born July 16, 1966) is an American director, screenwriter and producer.",
             " He lives in Los Angeles, California.",
             " He is best known for directing horror films such as \"Sinister\", \"The Exorcism of Emily Rose\", and "
             "\"Deliver Us From Evil\", as well as the 2016 Marvel Cinematic Universe installment, "
             "\"Doctor Strange.\""],
            ["Woodson is a census-designated place (CDP) in Pulaski County, Arkansas, in the United States.",
             " Its population was 403 at the 2010 census.",
             " It is part of the Little Rock\u2013North Little Rock\u2013Conway Metropolitan Statistical Area.",
             " Woodson and its accompanying Woodson Lake and Wood Hollow are the namesake for Ed Wood Sr., a "
             "prominent plantation owner, trader, and businessman at the turn of the 20th century.",
             " Woodson is adjacent to the Wood Plantation, the largest of the plantations own by Ed Wood Sr."],
            ["Tyler Bates (born June 5, 1965) is an American musician, music producer, and composer for films, "
             "television, and video games.",
             " Much of his work is in the action and horror film genres, with films like \"Dawn of the Dead, 300, "
             "Sucker Punch,\" and \"John Wick.\"",
             " He has collaborated with directors like Zack Snyder, Rob Zombie, Neil Marshall, William Friedkin, "
             "Scott Derrickson, and James Gunn.",
             " With Gunn, he has scored every one of the director's films; including \"Guardians of the Galaxy\", "
             "which became one of the highest grossing domestic movies of 2014, and its 2017 sequel.",
             " In addition, he is also the lead guitarist of the American rock band Marilyn Manson, and produced its "
             "albums \"The Pale Emperor\" and \"Heaven Upside Down\"."],
            ["Edward Davis Wood Jr. (October 10, 1924 \u2013 December 10, 1978) was an American filmmaker, actor, "
             "writer, producer, and director."],
            ["Deliver Us from Evil is a 2014 American supernatural horror film directed by Scott Derrickson and "
             "produced by Jerry Bruckheimer.",
             " The film is officially based on a 2001 non-fiction book entitled \"Beware the Night\" by Ralph Sarchie "
             "and Lisa Collier Cool, and its marketing campaign highlighted that it was \"inspired by actual "
             "accounts\".",
             " The film stars Eric Bana, \u00c9dgar Ram\u00edrez, Sean Harris, Olivia Munn, and Joel McHale in the "
             "main roles and was released on July 2, 2014."],
            ["Adam Collis is an American filmmaker and actor.",
             " He attended the Duke University from 1986 to 1990 and the University of California, Los Angeles from "
             "2007 to 2010.",
             " He also studied cinema at the University of Southern California from 1991 to 1997.",
             " Collis first work was the assistant director for the Scott Derrickson's short \"Love in the Ruins\" "
             "(1995).",
             " In 1998, he played \"Crankshaft\" in Eric Koyanagi's \"Hundred Percent\"."],
            ["Sinister is a 2012 supernatural horror film directed by Scott Derrickson and written by Derrickson and "
             "C. Robert Cargill.",
             " It stars Ethan Hawke as fictional true-crime writer Ellison Oswalt who discovers a box of home movies "
             "in his attic that puts his family in danger."],
            ["Conrad Brooks (born Conrad Biedrzycki on January 3, 1931 in Baltimore, Maryland) is an American actor.",
             " He moved to Hollywood, California in 1948 to pursue a career in acting.",
             " He got his start in movies appearing in Ed Wood films such as \"Plan 9 from Outer Space\", \"Glen or "
             "Glenda\", and \"Jail Bait.\"",
             " He took a break from acting during the 1960s and 1970s but due to the ongoing interest in the films "
             "of Ed Wood, he reemerged in the 1980s and has become a prolific actor.",
             " He also has since gone on to write, produce and direct several films."],
            ["Doctor Strange is a 2016 American superhero film based on the Marvel Comics character of the same "
             "name, produced by Marvel Studios and distributed by Walt Disney Studios Motion Pictures.",
             " It is the fourteenth film of the Marvel Cinematic Universe (MCU).",
             " The film was directed by Scott Derrickson, who wrote it with Jon Spaihts and C. Robert Cargill, and "
             "stars Benedict Cumberbatch as Stephen Strange, along with Chiwetel Ejiofor, Rachel McAdams, Benedict "
             "Wong, Michael Stuhlbarg, Benjamin Bratt, Scott Adkins, Mads Mikkelsen, and Tilda Swinton.",
             " In \"Doctor Strange\", surgeon Strange learns the mystic arts after a career-ending car accident."],
        ],
    },
}
MMLU_VAL_PSYCHOLOGY_47 = {  # data/val/high_school_psychology_val.csv, row 47 (answer A)
    "question": "People generally send higher contributions to charities when check-off boxes on the response card "
                "the charity sends to donors suggest $25, $35, $50, other; rather than $10, $15, $25, other. This "
                "illustrates the",
    "subject": "high_school_psychology",
    "choices": ["anchoring effect", "availability heuristic", "representativeness heuristic", "mental set"],
    "answer": 0,
}
MATH_ALGEBRA_1535 = {  # MATH test/algebra/1535.json
    "problem": "If the parabola $y_1 = x^2 + 2x + 7$ and the line $y_2 = 6x + b$ intersect at only one point, what "
               "is the value of $b$?",
    "level": "Level 5",
    "type": "Algebra",
    "solution": "If the curves $y_1$ and $y_2$ intersect at only one point, then there should be only one solution "
                "to the equation $x^2 + 2x + 7 = 6x + b$. To find $b$, we first rearrange the equation to get $x^2 "
                "-4x + (7-b) = 0$. This equation has only one solution if and only if the discriminant of $x^2 - 4x "
                "+ (7 - b) = 0$. Thus, we need  \\begin{align*}\n16 - 4(7-b) &= 0 \\quad \\Rightarrow \\\\\n4b &= "
                "12 \\quad \\Rightarrow \\\\\nb &= \\boxed{3}.\n\\end{align*}",
}


def shipped(name: str, row_id: str) -> dict:
    for _, row in read_jsonl(resolve_dataset(name)[1]):
        if row["id"] == row_id:
            return row
    raise AssertionError(f"{row_id} is not in the shipped {name} subset")


# ------------------------------------------------------------------------------------ converters


@pytest.mark.parametrize("convert, row, row_id, name", [
    (hf.gsm8k_row, GSM8K_TRAIN_4530, "gsm8k-train-4530", "gsm8k"),
    (hf.gsm8k_row, GSM8K_TRAIN_5330, "gsm8k-train-5330", "gsm8k"),
    (hf.nq_open_row, NQ_OPEN_DEV_1006, "nq_open-dev-1006", "nq_open"),
    (hf.triviaqa_row, TRIVIAQA_RC_TRAIN_1, "triviaqa-rc-train-1", "triviaqa"),
    (hf.hotpotqa_row, HOTPOTQA_DEV, "5a8b57f25542995d1e6f1371", "hotpotqa"),
    (hf.mmlu_row, MMLU_VAL_PSYCHOLOGY_47, "mmlu-high_school_psychology-val-47", "mmlu"),
])
def test_a_hub_row_converts_to_the_shipped_row_of_the_same_question(convert, row, row_id, name):
    assert convert(row, row_id) == shipped(name, row_id)


def test_a_math_row_converts_to_the_shipped_row_but_for_its_id():
    """The Hub copy of MATH has no problem file names, so only the id differs from the shipped row."""
    converted = hf.math_row(MATH_ALGEBRA_1535, "math-test-algebra-0")
    assert converted == {**shipped("math", "test/algebra/1535.json"), "id": "math-test-algebra-0"}


def test_math_answer_override_and_unanswerable_rows():
    notation = next(iter(hf.MATH_ANSWER_OVERRIDES))  # boxes its notation, leaves the answer unboxed
    row = {"problem": notation, "level": "Level 4", "type": "Prealgebra", "solution": "... $\\boxed{12}$ ..."}
    assert hf.math_row(row, "x")["answers"] == ["6"]
    unboxed = {**MATH_ALGEBRA_1535, "solution": "No box here."}
    rows = [("algebra", unboxed), ("algebra", MATH_ALGEBRA_1535), ("geometry", MATH_ALGEBRA_1535)]
    assert [r["id"] for r in hf.convert_rows("math", "test", rows)] == ["math-test-algebra-1", "math-test-geometry-0"]


def test_ids_use_the_original_split_names_and_per_subject_numbers():
    assert [r["id"] for r in hf.convert_rows("nq_open", "validation", [("nq_open", NQ_OPEN_DEV_1006)] * 2)] == \
        ["nq_open-dev-0", "nq_open-dev-1"]
    other = {**MMLU_VAL_PSYCHOLOGY_47, "subject": "anatomy"}
    rows = [("all", MMLU_VAL_PSYCHOLOGY_47), ("all", other), ("all", MMLU_VAL_PSYCHOLOGY_47)]
    assert [r["id"] for r in hf.convert_rows("mmlu", "validation", rows)] == [
        "mmlu-high_school_psychology-val-0", "mmlu-anatomy-val-0", "mmlu-high_school_psychology-val-1"]
    assert next(hf.convert_rows("gsm8k", "test", [("main", GSM8K_TRAIN_4530)]))["id"] == "gsm8k-test-0"


def test_a_row_in_another_layout_is_one_line():
    with pytest.raises(InputError, match=r"openai/gsm8k \(main, train\) is not laid out .*KeyError: 'answer'"):
        list(hf.convert_rows("gsm8k", "train", [("main", {"question": "What is 2 + 2?", "solution": "4"})]))


# ------------------------------------------------------------------------------------ names, errors


def test_names_and_default_splits():
    assert hf.parse_hf_name("hf:gsm8k") == ("gsm8k", "train")  # the split the shipped subset comes from
    assert hf.parse_hf_name("hf:mmlu:test") == ("mmlu", "test")
    assert set(hf.HUB_DATASETS) == {"gsm8k", "triviaqa", "nq_open", "hotpotqa", "mmlu", "math"}


@pytest.mark.parametrize("text, pieces", [
    ("hf:gsm9k", ["unknown Hugging Face dataset 'hf:gsm9k'", "hf:gsm8k", "hf:math"]),
    ("hf:", ["unknown Hugging Face dataset", "hf:triviaqa"]),
    ("hf:gsm8k:dev", ["hf:gsm8k has no split 'dev'", "train, test"]),
    ("hf:nq_open:test", ["hf:nq_open has no split 'test'", "validation, train"]),
])
def test_unknown_names_and_splits_are_one_line(text, pieces, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))
    with pytest.raises(InputError) as error:
        resolve_dataset(text)
    message = str(error.value)
    assert "\n" not in message and all(piece in message for piece in pieces), message


def test_without_the_datasets_library_one_line_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now fails, installed or not
    with pytest.raises(InputError) as error:
        resolve_dataset("hf:gsm8k")
    message = str(error.value)
    assert "pip install 'grade-studio[hf]'" in message and "\n" not in message
    assert not list(tmp_path.rglob("*.jsonl*")) and not list(tmp_path.rglob("*.tmp"))


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="the datasets library is installed here")
def test_label_command_without_the_datasets_library_exits_2_with_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "grade", "label", "--dataset", "hf:gsm8k", "--model", "smollm2-135m-instruct",
               "--out", str(tmp_path / "labels.jsonl")]
    done = subprocess.run(command, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    # one line and nothing else: no traceback, and no model-loading progress either
    assert len(lines) == 1 and lines[0].startswith("error: ") and "grade-studio[hf]" in lines[0], done.stderr
    assert not (tmp_path / "labels.jsonl").exists()


def stand_in_datasets(load_dataset) -> types.ModuleType:
    """A module in place of the ``datasets`` library, whose ``load_dataset`` is the one given."""
    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    return module


def test_a_hub_failure_says_network_is_needed_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))

    def offline(*args, **kwargs):  # what datasets raises with no network and nothing cached
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", stand_in_datasets(offline))
    with pytest.raises(InputError) as error:
        resolve_dataset("hf:gsm8k:test")
    message = str(error.value)
    assert "\n" not in message
    for piece in ("openai/gsm8k (test)", "ConnectionError", "network access", "--dataset gsm8k", "offline"):
        assert piece in message, message
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_split_is_fetched_once_converted_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))
    calls = []

    def load_dataset(path, name=None, *, split=None, streaming=False, **kwargs):
        calls.append((path, name, split, streaming, kwargs))
        return iter([GSM8K_TRAIN_4530, GSM8K_TRAIN_5330])

    monkeypatch.setitem(sys.modules, "datasets", stand_in_datasets(load_dataset))
    name, path = resolve_dataset("hf:gsm8k")
    assert calls == [("openai/gsm8k", "main", "train", True, {})]  # no trust_remote_code, only this split
    assert (name, path) == ("gsm8k", tmp_path / "datasets" / "hf-gsm8k-train.jsonl")
    assert [row for _, row in read_jsonl(path)] == [hf.gsm8k_row(GSM8K_TRAIN_4530, "gsm8k-train-0"),
                                                    hf.gsm8k_row(GSM8K_TRAIN_5330, "gsm8k-train-1")]
    monkeypatch.setitem(sys.modules, "datasets", None)  # cached: the library is not needed any more
    questions = load_questions("hf:gsm8k")
    assert [(q.id, q.task, q.dataset, q.answers) for q in questions] == [
        ("gsm8k-train-0", "gsm8k", "gsm8k", ["24"]), ("gsm8k-train-1", "gsm8k", "gsm8k", ["27200", "27,200"])]
    assert len(calls) == 1
