"""Stage 1 of a library search at scale: FTS5 BM25 vs a plain linear scan of the same windows, one run.

    python benchmarks/bench_library_scale.py                  # 100,000 windows
    python benchmarks/bench_library_scale.py --windows 2000 --queries 10 --json out.json

The text is caption-like, not random strings. Its sentence shapes are the examples' ground truth
(examples/examples.json: scene sentences and event descriptions); each content word of a shape is a slot
of its kind (person, animal, vehicle, object, place, nature, clothing, body, colour, adjective, verb,
direction, adverb, number), filled from ``VOCABULARY`` (about 2,600 words of everyday footage, the
ground truth's among them) at Zipf-Mandelbrot frequencies: the word of rank r in its kind is drawn with
weight 1 / (r + 1 + 2.7), so a few words are very common and most are rare, as in real captions.
Each video has a topic, a few words of each kind drawn once and taken by half of its slots across all
its windows; one video in twenty records one of the 12 examples (its sentences, half of its slots keeping
the example's own words), so the ground truth's queries have true matches. The library is written with
the real schema (``library.database.Store.put_video``, 100 windows per video).

The queries alternate: a ground-truth query, then one made the same way as the text (a ground-truth
query's shape with its slots drawn at the same frequencies, no topic), never chosen to be rare.

Both sides return the best N = 8 windows for each query:
- stage 1: ``Store.stage1`` as ``search`` runs it;
- the scan: every window read from the same database, each query word counted in its text
  (casefolded, the same words stage 1 asks for), the N highest totals kept; it is also timed on
  texts already in memory (the scan's best case, no reading).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marlin_demo.library import database
from marlin_demo.library.database import Store, WindowText, match_expression, query_words
from marlin_demo.settings import EXAMPLES_DIR, EXAMPLES_FILE

CANDIDATES = 8
WINDOWS_PER_VIDEO = 100
WORD = re.compile(r"\w+")
#: Zipf-Mandelbrot within a kind: the word of rank r (0: the most common) has weight 1 / (r + 1 + Q) ** S.
ZIPF_S = 1.0
ZIPF_Q = 2.7
#: A video's topic: how many words of each kind it draws once and reuses across its windows.
TOPIC_WORDS = {"person": 2, "animal": 1, "vehicle": 1, "object": 4, "place": 1, "nature": 2, "clothing": 2,
               "colour": 2, "adjective": 2, "verb": 3}  # fmt: skip
TOPIC_SHARE = 0.5  # a slot's chance to take one of its video's topic words (else a fresh draw)
EXAMPLE_SHARE = 0.05  # a video's chance to record one of the examples
KEEP_SHARE = 0.5  # in such a video, a slot's chance to keep the example's own word

#: A caption vocabulary of everyday footage by kind, each kind roughly from common to rare (the Zipf rank);
#: the ground truth's own words are among them. A word listed under two kinds belongs to the first.
VOCABULARY: dict[str, str] = {
    "person": """
        man woman person people boy girl child children men women kid kids player players crowd family
        couple baby driver worker workers student students team group figure figures soldier soldiers rider
        runner dancer dancers chef cook waiter customer officer police guard teacher doctor nurse athlete
        athletes audience spectators fans reporter presenter host speaker technician mechanic farmer
        fisherman gardener builder painter artist photographer tourist tourists pedestrian pedestrians
        passenger passengers pilot sailor surfer skier skateboarder swimmer climber hiker jogger cyclist
        boxer wrestler referee coach goalkeeper shopper vendor cashier clerk firefighter paramedic cleaner
        lady gentleman grandmother grandfather mother father son daughter brother sister friend friends
        neighbour stranger character characters robot robots astronaut bride groom guests shepherd teenager
        toddler singer musician guitarist drummer pianist violinist actor actress performer magician clown
        juggler acrobat gymnast skater diver rower archer hunter ranger scientist engineer surgeon dentist
        baker butcher barber tailor carpenter plumber electrician welder miner sheriff knight king queen
        prince princess wizard pirate captain monk priest nun judge lawyer banker manager secretary
        receptionist porter courier postman milkman lifeguard instructor trainer pupil professor scout
        volunteer protester marcher commuter traveller hitchhiker beggar busker cowboy rancher jockey
        groomsman bridesmaid twins triplets infant youngster elder pensioner villager citizen resident
        visitor guest owner tenant landlord
    """,
    "animal": """
        dog cat bird horse cow sheep duck chicken pigeon fish rabbit bunny squirrel deer goat pig puppy
        kitten seagull crow owl eagle hawk parrot goose swan mouse rat fox wolf bear lion tiger elephant
        giraffe zebra monkey gorilla kangaroo camel donkey pony shark dolphin whale seal turtle frog lizard
        snake spider bee butterfly insect fly ant beetle snail crab lobster octopus jellyfish penguin
        flamingo heron stork peacock hen rooster calf lamb bull ox buffalo moose raccoon hedgehog bat
        hamster ferret otter beaver chipmunk sparrow robin finch parakeet canary goldfish koi salmon trout
        dragonfly moth caterpillar worm ladybug grasshopper cricket mosquito wasp hornet gecko iguana
        chameleon tortoise alligator crocodile hippo rhino leopard cheetah jaguar panther lynx cougar hyena
        jackal coyote badger skunk possum mole vole weasel mink walrus manatee orca stingray eel squid clam
        oyster mussel shrimp starfish seahorse pelican albatross puffin kingfisher woodpecker hummingbird
        magpie raven vulture falcon ostrich emu kiwi toucan cockatoo macaw quail pheasant partridge turkey
        gull tern crane ibis egret cormorant llama alpaca yak bison antelope gazelle elk reindeer hare
        chinchilla guinea lemur sloth armadillo anteater koala panda meerkat mongoose porcupine bullfrog
        toad newt salamander cobra python
    """,
    "vehicle": """
        car cars truck bus bicycle bike motorcycle van taxi train boat ship plane airplane helicopter
        tractor jeep sedan hatchback pickup trailer ambulance lorry minivan limousine convertible coupe
        wagon cart carriage skateboard scooter kayak canoe yacht sailboat ferry submarine rocket drone
        forklift bulldozer excavator motorbike moped tank subway tram locomotive caravan camper buggy sled
        snowmobile jetski raft barge tugboat glider balloon blimp tricycle unicycle wheelchair stroller pram
        rickshaw firetruck roadster hearse steamboat speedboat dinghy gondola cableway monorail streetcar
        trolley coach minibus cab racecar kart quad hovercraft seaplane jet airliner spaceship spacecraft
        shuttle satellite chariot sleigh wheelbarrow handcart segway hoverboard unicar dumper tipper tanker
        freighter liner
    """,
    "object": """
        table door window chair ball bottle bottles lamp phone camera screen box bag cup glass book paper
        sheet bed sofa couch desk shot shots view angle shelf cabinet counter sink mirror clock picture sign
        flag fence gate bench ladder bucket basket toy doll pillow blanket towel curtain laptop computer
        keyboard monitor television remote notebook pen pencil plate bowl spoon fork knife pan pot kettle
        mug jar lid candle vase umbrella hat microphone guitar piano drum violin trumpet flute rope hammer
        saw drill wrench screwdriver shovel rake hose broom mop brush comb toothbrush soap sponge bin trash
        wheel tire seat helmet engine steering flashlight torch key keys lock wallet purse coin money card
        ticket map letter envelope package parcel gift ribbon balloon kite frisbee racket net goal hoop puck
        stick skis surfboard board dumbbell mat gun rifle sword shield turret armour bow arrow spear axe
        pistol cannon bomb grenade target apple banana bread cake pizza sandwich burger egg eggs cheese milk
        coffee tea juice soup rice pasta salad meat tomato potato carrot onion pepper lemon grape strawberry
        cherry cookie chocolate candy sugar salt flour butter honey wine beer soda popcorn noodles sushi
        taco hotdog pie donut muffin cereal yogurt watermelon pineapple mango peach pear plum melon coconut
        avocado cucumber lettuce cabbage broccoli corn beans peas mushroom garlic ginger herbs spices sauce
        ketchup mustard oil vinegar fridge refrigerator oven stove microwave toaster blender dishwasher
        washer dryer iron vacuum fan heater radiator thermostat switch socket plug cable wire charger
        battery bulb chandelier lantern torchlight rug carpet mattress wardrobe dresser nightstand armchair
        stool cushion hammock crib cradle highchair bookcase bookshelf filing folder stapler scissors tape
        glue ruler calculator printer scanner projector whiteboard blackboard chalk marker eraser globe
        telescope microscope magnifier binoculars compass tablet smartphone headphones earphones speaker
        speakers radio stereo record turntable cassette joystick controller console gamepad dice cards chess
        checkers puzzle blocks lego marbles yoyo crayon paint paintbrush canvas easel palette sculpture
        statue photo photograph album poster painting portrait mural banner placard leaflet newspaper
        magazine brochure menu receipt invoice suitcase luggage backpack briefcase handbag tote trolley
        cooler thermos flask canteen lunchbox tray platter saucer teapot teacup jug pitcher carafe decanter
        goblet chalice tumbler straw napkin tablecloth placemat coaster chopsticks ladle spatula whisk
        grater peeler colander sieve funnel rolling pin cutting skillet wok saucepan casserole baking tin
        mold lunch dinner breakfast meal dish dessert snack drink drinks cocktail smoothie lemonade water
        can cans carton crate barrel sack bundle pile stack heap roll coil spool reel hook hanger peg nail
        screw bolt nut hinge handle knob latch padlock chain cage trap bait rod fishing tackle float oar
        paddle anchor buoy sail mast rudder propeller hull deck cabin cockpit dashboard windshield wiper
        bumper hood trunk headlights taillights exhaust pedal brake gear clutch horn license antenna tent
        sleeping campfire firewood log logs matches lighter ashtray cigarette pipe cigar planter watering
        trowel pruner shears mower lawnmower sprinkler wheelbarrow seed seeds fertilizer compost greenhouse
        shed doghouse birdhouse feeder leash collar muzzle treat bone toybox rattle pacifier bib diaper
        nappy teddy bear stuffed plush puppet mask costume wig crown tiara wand cape badge medal trophy
        certificate diploma pennant scarf whistle stopwatch timer scoreboard goalpost basketball football
        soccer baseball tennis golf cricket volleyball hockey rugby badminton pingpong bowling pins skipping
        trampoline swing slide seesaw sandbox carousel ferris rollercoaster booth kiosk stall cart vending
        machine atm register till shelves aisle checkout conveyor scale weights barbell treadmill bicycle
        pads skates rollerblades snowboard sledge ski poles goggles lifejacket wetsuit flippers snorkel tube
        rings lilo parasol deckchair sunbed spade sandcastle shells pebbles driftwood seaweed boat lobster
        harpoon pillar column beam post pole rail railing banister step steps scaffold brick bricks tile
        tiles plank planks boards panel pane concrete asphalt gravel cement plaster robot arm lever button
        buttons dial display signs signal traffic light lights streetlight lamppost hydrant mailbox postbox
        letterbox dumpster container skip pallet forklift debris rubble wreck ruins smoke title credits film
        movie scene footage clip logo text caption subtitle letters words numbers symbol icon shape shapes
        square circle triangle rectangle dot dots line lines stripe stripes pattern grid cube sphere cone
        cylinder pyramid star hexagon segments segment piece pieces part parts slice slices cap caps lids
        sleeve cover label sticker tag string thread needle zipper buckle strap lace laces bead beads jewel
        gem diamond pearl ring necklace bracelet earring earrings watch bangle brooch locket pendant anklet
        angles time times battle credit lapse project burrow mound stamens buck james webb cardboard
        paperwork document documents file files report form forms chart graph slides notice noticeboard
        calendar diary planner clipboard lanyard keycard pass
    """,
    "place": """
        room street road field park garden kitchen beach house building buildings city office parking lot
        yard hall stage studio classroom school library hospital store shop supermarket market restaurant
        cafe bar hotel lobby corridor hallway staircase stairs elevator bathroom bedroom lounge basement
        attic porch patio terrace rooftop roof square plaza station platform airport harbour port dock pier
        bridge tunnel highway motorway intersection crossing crosswalk sidewalk pavement alley lane path
        trail track stadium arena court gym pitch playground church temple mosque castle palace museum
        gallery theatre cinema factory warehouse workshop farm barn stable meadow forest woods jungle desert
        mountain hill hills valley river lake sea ocean shore coast island cliff cave canyon waterfall pond
        stream creek bay lagoon marsh swamp glacier volcano prairie savanna orchard vineyard fields ranch
        village town suburb neighbourhood downtown centre center campus courtyard cloister chapel cathedral
        monastery tower lighthouse windmill mill dam canal lock quay marina boatyard shipyard dockyard depot
        garage driveway carport car gas petrol pump wash showroom dealership bank post police fire
        courthouse embassy prison jail barracks base camp campsite cabin cottage hut shack bungalow villa
        mansion apartment flat condo penthouse dormitory hostel motel inn resort spa salon barbershop bakery
        butcher pharmacy clinic laboratory lab server data control cockpit engine deck hold galley mess
        canteen cafeteria diner bistro pub tavern club nightclub ballroom concert auditorium lecture
        amphitheatre bandstand pavilion gazebo greenhouse conservatory nursery kindergarten gymnasium pool
        swimming rink skatepark racetrack racecourse golf course tennis football baseball basketball ski
        slope trailhead viewpoint lookout summit peak ridge plateau gorge ravine dune dunes oasis steppe
        tundra heath moor moorland grassland woodland clearing grove thicket bush riverbank riverside
        lakeside seaside seafront promenade boardwalk esplanade waterfront wharf jetty mall arcade boulevard
        avenue roundabout junction overpass underpass flyover ramp toll border checkpoint crossroads
        backstreet countryside outskirts wilderness backyard frontyard lawn allotment farmyard paddock
        pasture pen coop sty kennel aviary aquarium zoo safari circus fairground funfair carnival festival
        stall bazaar souk marketplace space battlefield trench bunker fortress ruins balcony chamber vault
        crypt dungeon
    """,
    "nature": """
        sky tree trees grass water sun light clouds cloud flower flowers branch leaves leaf plant plants
        bush bushes rock rocks stone stones sand mud dirt dust moon stars star rain snow fog mist smoke fire
        flame flames wave waves ice wind sunlight shadow shadows sunset sunrise horizon daylight night dusk
        dawn twilight storm thunder lightning rainbow hail frost dew puddle puddles stream rapids current
        tide foam spray splash ripples reeds lily lilies rose roses tulip tulips daisy daisies sunflower
        orchid petals petal stem stems bud buds seedling sapling trunk bark roots root twig twigs log moss
        fern ferns vine vines ivy weeds hay straw wheat barley crop crops hedge hedges shrub shrubs cactus
        palm pine oak maple birch willow bamboo blossom blossoms acorn pinecone berries berry fruit nuts
        mushroom mushrooms pebble boulder boulders gravel soil clay lava ash embers sparks steam vapour haze
        glare reflection reflections silhouette glow halo beam beams rays sunshine moonlight starlight
        breeze gust gale drizzle downpour shower sleet blizzard snowflakes snowfall icicles hailstones
        waterfall spring geyser crater slope meadow grassland field earth ground surface landscape scenery
        view skyline sea ocean lake planet planets galaxy comet meteor asteroid
    """,
    "clothing": """
        shirt jacket coat dress hat cap hoodie suit sweater cardigan jeans trousers pants shorts skirt shoes
        boots sneakers sandals glasses sunglasses helmet uniform apron vest tshirt blouse tie scarf gloves
        mask backpack belt socks tights leggings pyjamas nightgown robe bathrobe overalls dungarees jumpsuit
        tracksuit swimsuit bikini trunks raincoat poncho parka anorak windbreaker blazer waistcoat tuxedo
        gown kimono sari turban headscarf beanie beret bonnet bandana headband visor hood earmuffs mittens
        slippers heels loafers clogs flipflops wellies trainers cleats spurs armour chainmail cloak cape
        tunic toga kilt sarong shawl stole sash bowtie cufflinks collar sleeve sleeves pocket pockets lab
        scrubs overcoat trench fleece jersey polo camisole corset bodysuit
    """,
    "body": """
        hand hands head face hair arm arms back leg legs foot feet eyes eye mouth shoulder shoulders finger
        fingers nose ear ears knee knees neck chest body wings wing tail paw paws backs beak feathers fur
        mane horns hooves claws whiskers teeth tongue lips cheek cheeks chin forehead eyebrows beard
        moustache fist palm thumb wrist elbow hip hips waist stomach belly skin toes heel ankle thigh lap
    """,
    "colour": """
        white black red blue green grey yellow brown orange pink purple silver golden gold beige dark light
        pale bright navy teal turquoise maroon violet cream tan khaki ivory olive lime crimson scarlet amber
        bronze copper peach lavender lilac magenta cyan indigo mauve rust charcoal slate ochre mustard coral
        salmon burgundy emerald jade sapphire ruby chestnut auburn blonde ginger platinum
    """,
    "adjective": """
        small large big empty long old young wooden round standing open closed wet short tall little new
        full wide high low distant close fixed clean dirty busy quiet crowded sunny cloudy rainy snowy foggy
        windy hot cold warm cool heavy fast slow narrow deep shallow flat steep smooth rough soft hard thick
        thin tiny huge giant massive enormous metal plastic paper glass stone brick concrete leather woolen
        striped spotted checked plain patterned shiny dull rusty broken ruined overgrown abandoned modern
        ancient historic rural urban sandy grassy rocky muddy dusty icy frozen misty hazy shady leafy lush
        dry damp soaked bare naked blank packed cramped spacious cozy tidy messy neat colourful vivid faded
        blurred sharp focused animated cartoon realistic simple ornate elaborate decorative mechanical
        robotic electric digital wireless portable folding sliding rotating spinning flying floating hanging
        lying sitting sleeping running moving parked stationary still calm stormy lit unlit illuminated
        glowing flashing blinking dim bright shadowy sunlit moonlit outdoor indoor public private main
        central upper lower inner outer single double twin several many few whole half entire various
        different similar identical other same another next last first second third final early late morning
        evening daytime nighttime festive formal casual elegant shabby worn torn stained polished painted
        carved curved straight square circular oval rectangular triangular hexagonal pointed blunt hollow
        solid transparent opaque reflective metallic rubber velvet silk cotton denim fluffy furry hairy bald
        bearded blonde curly wavy skinny slim chubby muscular elderly teenage aged happy sad angry smiling
        laughing crying surprised scared tired sleepy curious excited nervous bored serious friendly playful
        lonely careful hungry thirsty injured wounded armed live fictional futuristic vintage retro classic
        industrial residential commercial agricultural edged paved visible crescent sports science fiction
        action wild domestic stray tame pet farm marine tropical arctic alpine coastal inland remote local
    """,
    "verb": """
        walks stands sits looks holds drives turns moves opens runs appears leaves falls rolls enters takes
        puts picks lifts carries pushes pulls throws catches drops places jumps climbs rides crosses waves
        points talks speaks smiles laughs cries sings dances plays eats drinks cooks cuts pours mixes stirs
        washes cleans wipes sweeps paints draws writes reads types reaches grabs hands gives shows passes
        stops starts waits watches follows leads chases hides finds searches shakes nods bows kneels
        crouches lies sleeps wakes yawns stretches rests sighs breathes coughs sneezes shouts whispers calls
        answers listens hears touches taps knocks rings presses clicks swipes scrolls slides swings spins
        rotates flips bounces tosses kicks hits strikes punches blocks dodges ducks fires aims shoots
        reloads explodes burns glows shines flashes blinks flickers fades dims brightens darkens changes
        grows shrinks swells unfolds blooms closes wilts melts freezes flows drips splashes floats sinks
        swims dives surfs paddles rows sails flies lands hovers circles soars glides flaps perches pecks
        hops crawls slithers creeps sneaks tiptoes marches jogs sprints races skates skis snowboards
        skateboards cycles pedals steers brakes accelerates reverses parks honks overtakes merges exits
        arrives departs returns approaches meets greets hugs kisses embraces drags hauls loads unloads
        stacks piles sorts arranges folds wraps unwraps ties unties zips buttons dresses undresses wears
        removes adds fills empties spills fixes repairs builds assembles installs mounts attaches detaches
        connects plugs unplugs charges switches adjusts tilts pans zooms focuses films records photographs
        poses frowns stares glances peers gazes handles operates controls lever twists screws hammers saws
        drills digs plants waters mows rakes trims prunes harvests feeds pets strokes brushes combs grooms
        trains teaches explains demonstrates presents announces reports interviews argues discusses
        negotiates sells buys pays counts weighs measures checks inspects tests examines scans observes
        monitors guards patrols protects rescues helps supports raises lowers hangs leans lounges relaxes
        sunbathes chats texts dials browses shops queues boards alights commutes travels tours explores
        hikes descends ascends slips trips stumbles collapses faints recovers rises gets dressed switched
        seen show opening fading advance walk stand sit look hold drive turn move open run take put pick
        lift carry push pull throw walking standing sitting looking holding driving turning moving running
        taking putting lying walked stood sat looked held drove turned moved opened ran took removed closed
        stopped leaving passing crouching flying hanging remain remains stays meet shake pass hit aim appear
        leave fade stop comes goes unfold
    """,
    "direction": """
        right left top bottom middle side sides front back centre center corner edge edges foreground
        background distance directions frame floor wall walls ceiling windows row rows
    """,
    "adverb": """
        slowly quickly away together back once twice alone smoothly suddenly gently carefully finally still
        almost completely closer upward downward forward backward sideways around briefly calmly loudly
        quietly steadily rapidly gradually repeatedly eagerly lazily
    """,
    "number": """
        two three one four five several many few six seven eight ten dozen both
    """,
}


def vocabulary() -> dict[str, list[str]]:
    """Each kind's words, most common first; a word listed twice belongs to its first kind."""
    seen: set[str] = set()
    out: dict[str, list[str]] = {}
    for kind, text in VOCABULARY.items():
        out[kind] = [w for w in dict.fromkeys(text.split()) if w not in seen]
        seen.update(out[kind])
    return out


#: A shape's part: literal text, or a slot (its kind, the ground truth's word, capitalised or not).
Part = str | tuple[str, str, bool]


def shape(text: str, kinds: dict[str, str]) -> list[Part]:
    """A ground-truth sentence as literal text and slots (its words of the vocabulary)."""
    parts: list[Part] = []
    pos = 0
    for m in WORD.finditer(text):
        word = m.group(0)
        kind = kinds.get(word.lower())
        if kind is not None:
            parts += [text[pos : m.start()], (kind, word.lower(), word[0].isupper())]
            pos = m.end()
    return [*parts, text[pos:]]


@dataclass(frozen=True)
class Example:
    """One example's ground truth as shapes, and its own words of each kind (a recording's topic)."""

    scenes: list[list[Part]]
    events: list[list[Part]]
    queries: list[str]
    words: dict[str, list[str]]


def ground_truth(kinds: dict[str, str], examples_dir: Path = EXAMPLES_DIR) -> list[Example]:
    """The examples' scene sentences, event descriptions and queries."""
    out = []
    for e in json.loads((examples_dir / EXAMPLES_FILE).read_text(encoding="utf-8")):
        scenes = [shape(s.strip() + ".", kinds) for s in e.get("scene", "").split(".") if s.strip()]
        events = [shape(ev["description"], kinds) for ev in e.get("events", [])]
        words: dict[str, list[str]] = {}
        for part in itertools.chain(*scenes, *events):
            if isinstance(part, tuple) and part[1] not in words.get(part[0], []):
                words.setdefault(part[0], []).append(part[1])
        out.append(Example(scenes, events, [q["query"] for q in e.get("queries", [])], words))
    return out


class Writer:
    """Caption-like text: ground-truth sentence shapes, their slots filled at Zipfian frequencies."""

    def __init__(self, seed: int, examples_dir: Path = EXAMPLES_DIR) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.words = vocabulary()
        self.kinds = {w: k for k, ws in self.words.items() for w in ws}
        self.cum = {
            k: list(itertools.accumulate(1 / (r + 1 + ZIPF_Q) ** ZIPF_S for r in range(len(ws))))
            for k, ws in self.words.items()
        }
        self.examples = ground_truth(self.kinds, examples_dir)
        self.scenes = [s for e in self.examples for s in e.scenes]
        self.events = [s for e in self.examples for s in e.events]
        self.truth_queries = [q for e in self.examples for q in e.queries]

    def draw(self, kind: str, rng: random.Random | None = None) -> str:
        return (rng or self.rng).choices(self.words[kind], cum_weights=self.cum[kind])[0]

    def fill(self, parts: list[Part], topic: dict[str, list[str]], keep: float = 0.0) -> str:
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            kind, own, capital = part
            r = self.rng.random()
            if r < keep:
                word = own
            elif topic.get(kind) and r < keep + (1 - keep) * TOPIC_SHARE:
                word = self.rng.choice(topic[kind])
            else:
                word = self.draw(kind)
            out.append(word.capitalize() if capital else word)
        return "".join(out)

    def video(self, windows: int) -> list[WindowText]:
        """One video's caption windows: a recording of an example, or a topic of its own."""
        if self.rng.random() < EXAMPLE_SHARE:
            ex = self.rng.choice(self.examples)
            scenes, events, topic, keep = ex.scenes, ex.events, ex.words, KEEP_SHARE
        else:
            scenes, events, keep = self.scenes, self.events, 0.0
            topic = {k: [self.draw(k) for _ in range(n)] for k, n in TOPIC_WORDS.items()}
        out = []
        for k in range(windows):
            start = 60.0 * k
            n_scene = self.rng.randint(1, 2)
            scene = " ".join(self.fill(self.rng.choice(scenes), topic, keep) for _ in range(n_scene))
            evs = [
                {"start": start + i * 10, "end": start + i * 10 + 5,
                 "description": self.fill(self.rng.choice(events), topic, keep)}
                for i in range(self.rng.randint(2, 4))
            ]  # fmt: skip
            out.append(WindowText(start, start + 60.0, scene, evs))
        return out

    def queries(self, n: int) -> list[str]:
        """``n`` queries: a ground-truth query, then one made as the text is (a ground-truth query's shape,
        its slots drawn at the same frequencies, no topic), and so on, cycled."""
        rng = random.Random(f"queries-{self.seed}")
        made = []
        for q in self.truth_queries:
            made.append("".join(
                p if isinstance(p, str) else self.draw(p[0], rng) for p in shape(q, self.kinds)
            ))  # fmt: skip
        both = [q for pair in zip(self.truth_queries, made, strict=True) for q in pair]
        return (both * (1 + n // len(both)))[:n]


def build(folder: Path, windows: int, seed: int) -> tuple[Store, Writer, dict[str, Any]]:
    """The library of ``windows`` caption windows, its writer, and what the build was: the seconds its
    writes took (text generation not counted) and the text's word statistics."""
    writer = Writer(seed)
    store = Store(folder)
    df: Counter[str] = Counter()  # windows holding each word
    tokens = 0
    write_s = 0.0
    made = 0
    v = 0
    while made < windows:
        wins = writer.video(min(WINDOWS_PER_VIDEO, windows - made))
        for w in wins:
            words = WORD.findall((w.scene + "\n" + w.events_text).casefold())
            tokens += len(words)
            df.update(set(words))
        digest = f"{v:064x}"
        t0 = time.perf_counter()
        store.put_video(
            vid=digest[-16:], digest=digest, name=f"video_{v:05d}.mp4", path=f"/videos/video_{v:05d}.mp4",
            size=0, mtime_ns=0, duration=60.0 * len(wins), windows=wins,
            events=[e for w in wins for e in w.events],
        )  # fmt: skip
        write_s += time.perf_counter() - t0
        made += len(wins)
        v += 1
    text = {
        "vocabulary": len(writer.kinds),
        "distinct_words": len(df),
        "words_per_window": round(tokens / max(1, made), 1),
        "most_common_vocabulary": [(w, round(n / made, 3)) for w, n in df.most_common() if w in writer.kinds][
            :12
        ],
        "df": df,
    }
    return store, writer, {"build_s": round(write_s, 2), "text": text}


def scan(rows: list[tuple[int, str]], words: list[str], n: int) -> list[int]:
    """The plain linear scan: each word's occurrences in each window's text, the n highest totals."""
    scored = ((sum(text.count(w) for w in words), wid) for wid, text in rows)
    return [wid for score, wid in heapq.nlargest(n, scored) if score > 0]


def summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "mean_ms": round(statistics.fmean(ms), 3),
        "p50_ms": round(statistics.median(ms), 3),
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 3),
    }


def query_stats(store: Store, queries: list[str], df: Counter[str], windows: int) -> dict[str, Any]:
    """How common the queries' words are in the text, how many windows stage 1 scores (its match), for
    how many queries only the windows with every rarer word, and how many of its best N are plain BM25's
    best N (every query word matched and scored, no common-word rule), as a share."""
    shares = sorted(df[w] / windows for q in queries for w in query_words(q))
    count = "SELECT COUNT(*) FROM windows_fts WHERE windows_fts MATCH ?"
    best = "SELECT rowid FROM windows_fts WHERE windows_fts MATCH ? ORDER BY bm25(windows_fts) LIMIT ?"
    matched, agree, every = [], [], 0
    for q in queries:
        expr, plain = store.stage1_expression(q, CANDIDATES), match_expression(q)
        every += expr != match_expression(q, store.common_words(q))
        matched.append(store.db.execute(count, (expr,)).fetchone()[0] if expr else 0)
        full = {wid for (wid,) in store.db.execute(best, (plain, CANDIDATES))} if plain else set()
        got = {h.wid for h in store.stage1(q, CANDIDATES)}
        agree.append(len(got & full) / len(full) if full else 1.0)
    return {
        "query_word_share_p50": round(statistics.median(shares), 4),
        "query_word_share_p90": round(shares[int(0.9 * (len(shares) - 1))], 4),
        "query_word_share_max": round(shares[-1], 4),
        "matched_windows_mean": round(statistics.fmean(matched)),
        "matched_windows_max": max(matched),
        "queries_every_rare_word": every,
        "agreement_with_plain_bm25": round(statistics.fmean(agree), 3),
    }


def measure(store: Store, queries: list[str]) -> dict[str, Any]:
    """Each query on the three sides in turn (stage 1, the scan from the database, the scan in memory),
    so that the other work on the machine weighs on all three alike."""

    def rows() -> list[tuple[int, str]]:
        return [
            (wid, (s + "\n" + e).casefold())
            for wid, s, e in store.db.execute("SELECT wid, scene, events FROM windows")
        ]

    memory = rows()
    sides: dict[str, Any] = {
        "stage1": lambda q: store.stage1(q, CANDIDATES),
        "scan_db": lambda q: scan(rows(), query_words(q), CANDIDATES),
        "scan_memory": lambda q: scan(memory, query_words(q), CANDIDATES),
    }
    for fn in sides.values():  # warm the page cache for every side alike
        fn(queries[0])
    ms: dict[str, list[float]] = {name: [] for name in sides}
    for q in queries:
        for name, fn in sides.items():
            t0 = time.perf_counter()
            fn(q)
            ms[name].append((time.perf_counter() - t0) * 1000)
    out: dict[str, Any] = {name: summary(v) for name, v in ms.items()}
    for name in ("scan_db", "scan_memory"):
        out[f"speedup_vs_{name}"] = round(out[name]["mean_ms"] / out["stage1"]["mean_ms"], 1)
    return out


def run(
    windows: int, queries: int, seed: int = 0, keep: Path | None = None, common_share: float | None = None
) -> dict[str, Any]:
    """Build, measure and describe. ``keep``: build the library there (a new or empty folder) and keep it;
    ``common_share``: stage 1's ``COMMON_SHARE`` for this run (an experiment; default: the store's)."""
    share = database.COMMON_SHARE
    database.COMMON_SHARE = share if common_share is None else common_share
    try:
        with tempfile.TemporaryDirectory(prefix="marlin-library-scale-") as tmp:
            folder = keep or Path(tmp)
            store, writer, built = build(folder, windows, seed)
            qs = writer.queries(queries)
            counts = store.counts()
            size = sum(p.stat().st_size for p in folder.glob("library.sqlite*"))
            text = built.pop("text")
            df = text.pop("df")
            vocabulary_used = sum(1 for w in writer.kinds if df[w])
            out = {
                "windows": counts[1], "videos": counts[0], "queries": len(qs), **built,
                "db_mb": round(size / 1e6, 1), "common_share": database.COMMON_SHARE,
                "load_average": [round(x, 2) for x in os.getloadavg()],
                **measure(store, qs),
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "text": {**text, "vocabulary_used": vocabulary_used,
                         **query_stats(store, qs, df, counts[1])},
            }  # fmt: skip
            store.close()
    finally:
        database.COMMON_SHARE = share
    return out


def render(r: dict[str, Any]) -> str:
    t = r["text"]
    pct = "{:.1%}".format
    lines = [
        f"{r['windows']:,} windows in {r['videos']:,} videos (written in {r['build_s']} s, {r['db_mb']} MB), "
        f"{r['queries']} queries, best {CANDIDATES} windows each; load average {r['load_average'][0]} "
        f"before, {r['load_average_after'][0]} after",
        f"text: {t['distinct_words']:,} distinct words ({t['vocabulary_used']:,} of the "
        f"{t['vocabulary']:,}-word vocabulary, the rest the shapes' own), {t['words_per_window']} a window",
        "its commonest vocabulary words, by share of the windows: "
        + ", ".join(f"{w} {share:.0%}" for w, share in t["most_common_vocabulary"]),
        f"query words: each in {pct(t['query_word_share_p50'])} of the windows (median; p90 "
        f"{pct(t['query_word_share_p90'])}, max {pct(t['query_word_share_max'])})",
        f"stage 1: scores {t['matched_windows_mean']:,} windows a query (mean; max "
        f"{t['matched_windows_max']:,}), words in over {r['common_share']:.0%} of them only scoring, "
        f"{t['queries_every_rare_word']} of the {r['queries']} queries only windows with every rarer word; "
        f"{pct(t['agreement_with_plain_bm25'])} of its best {CANDIDATES} are plain BM25's best",
        "",
        "| | mean ms/query | p50 | p95 | stage 1 is |",
        "|---|---|---|---|---|",
        f"| stage 1 (FTS5 BM25) | {r['stage1']['mean_ms']} | {r['stage1']['p50_ms']} | "
        f"{r['stage1']['p95_ms']} | |",
        f"| linear scan, read from the DB | {r['scan_db']['mean_ms']} | {r['scan_db']['p50_ms']} | "
        f"{r['scan_db']['p95_ms']} | {r['speedup_vs_scan_db']}x faster |",
        f"| linear scan, texts in memory | {r['scan_memory']['mean_ms']} | {r['scan_memory']['p50_ms']} | "
        f"{r['scan_memory']['p95_ms']} | {r['speedup_vs_scan_memory']}x faster |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=100_000, help="caption windows to index (default 100000)")
    p.add_argument(
        "--queries", type=int, default=66, help="queries to time (default 66: 33 ground-truth, 33 made)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--keep", default=None, help="build the library in this new or empty folder and keep it")
    p.add_argument(
        "--common-share", type=float, default=None,
        help="stage 1's common-word share for this run (an experiment; default: the store's, 0.05)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.windows < 1 or args.queries < 1:
        print("error: --windows and --queries must be at least 1.", file=sys.stderr)
        return 2
    if args.common_share is not None and not 0 < args.common_share <= 1:
        print("error: --common-share must be in (0, 1].", file=sys.stderr)
        return 2
    keep = Path(args.keep) if args.keep else None
    if keep is not None and keep.exists() and any(keep.iterdir()):
        print(f"error: --keep {keep} is not empty.", file=sys.stderr)
        return 2
    r = run(args.windows, args.queries, args.seed, keep, args.common_share)
    print(render(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
