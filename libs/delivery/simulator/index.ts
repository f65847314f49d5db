/** The reference workload simulator: a seeded generator of food-delivery events and its real-time pacer. */
export * from './arrival';
export * from './generator';
export * from './options';
export * from './runner';
